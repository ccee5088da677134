package informer

// objectName identifies an object within one resource. Its strings are the
// object's own (both caches' objects return them without copying), so an
// entry costs no allocation besides the map slot.
type objectName struct{ namespace, name string }

func nameOf(o Object) objectName { return objectName{o.GetNamespace(), o.GetName()} }

// lastSeen is the handler's own view of the resource: per object, the
// state the handler was last notified of. Snapshots read it instead of the
// informer's store because the informer updates the store before it queues
// the notification, without bound, for the handler: a record read from the
// store can be newer than updates still queued, and would reach the sinks
// before them (guarantee 3 of the architecture). Read and written only
// under Watcher.emitMu, in the same critical section as the Enqueue, so a
// record takes its place in the stream exactly where the handler stands.
//
// Memory: the values point at objects the store holds anyway; the cost is
// one map slot per object, a 32-byte key and a 16-byte interface, about
// 60-110 bytes with the map's load factor.
type lastSeen map[objectName]Object
