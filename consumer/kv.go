package consumer

import (
	"context"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// KVConfig says which key-value bucket a KVSource reads.
type KVConfig struct {
	// KeyValue is the bucket kubewire's NATS sink keeps (its jetstream.kv
	// option), from jetstream.JetStream.KeyValue on a connection the
	// caller made. Required.
	KeyValue jetstream.KeyValue
}

// KVSource starts a View from the key-value bucket that kubewire's NATS sink
// keeps (jetstream.kv), and keeps it live: it reads every key's current
// value, the object's latest event, then follows the bucket's updates. A
// bucket holds state, not history, so a View read from it is complete
// without snapshots: the sink deletes the keys a snapshot pruned.
//
// The bucket's stream, "KV_<bucket>", is the View's partition, and a
// revision is the position. A delete marker is applied as a Kafka tombstone
// is (it carries no final state): handlers get
// cache.DeletedFinalStateUnknown holding the last state the View held.
//
// The source always starts from the bucket's current state; it acks nothing
// (the watch is an ordered consumer).
type KVSource struct {
	v      *View
	cfg    KVConfig
	synced func()
}

// NewKVSource binds a source to v; v is not synced until Run read every key
// the bucket held when Run started.
func NewKVSource(v *View, cfg KVConfig) (*KVSource, error) {
	if cfg.KeyValue == nil {
		return nil, errors.New("consumer: a key-value source needs a bucket")
	}
	return &KVSource{v: v, cfg: cfg, synced: v.addSource()}, nil
}

// Run reads until ctx ends or the watch fails.
func (s *KVSource) Run(ctx context.Context) error {
	kv := s.cfg.KeyValue
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("consumer: watch bucket %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	partition := "KV_" + kv.Bucket()
	structured := natsgo.Header{"Content-Type": []string{kwnats.ContentTypeStructured}}
	for {
		e, err := kwnats.NextKVEntry(ctx, w)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("consumer: the watch of bucket %s ended", kv.Bucket())
		}
		if e == nil {
			// Every key's value as of the start was delivered.
			s.synced()
			continue
		}
		pos := Position{Partition: partition, Offset: int64(e.Revision())}
		switch e.Operation() {
		case jetstream.KeyValuePut:
			if ev, err := kwnats.DecodeMessage(structured, e.Value()); err != nil {
				s.v.Skip(pos, fmt.Errorf("key %s: %w", e.Key(), err))
			} else {
				s.v.Apply(pos, ev)
			}
		default: // a delete or purge marker
			if key, err := kwnats.PartitionKeyOfKV(e.Key()); err != nil {
				s.v.Skip(pos, err)
			} else {
				s.v.Tombstone(pos, key)
			}
		}
	}
}
