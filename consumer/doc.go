// Package consumer is the other end of kubewire's wire: it turns a Kafka
// topic or a JetStream stream that kubewire writes back into a live view of
// the objects, and into a client-go informer.
//
// A View applies the consumer's rule of docs/events.md: it drops an event
// whose id it already applied, never lets a lower resourceVersion overwrite a
// higher one, applies deletes and Kafka tombstones, prunes the keys a
// complete snapshot did not touch (and nothing on an incomplete one), and
// reports deletes noticed by a relist as cache.DeletedFinalStateUnknown.
//
// Sources (KafkaSource, JetStreamSource, and KVSource for the key-value
// bucket the NATS sink keeps) read a broker into a View. The first two
// commit an offset or ack a message only after the View applied it and every
// handler returned: delivery is at least once, and a handler may see an event
// again after a restart.
//
// NewListerWatcher and NewSharedIndexInformer let client-go controller code
// run unchanged against the broker.
package consumer
