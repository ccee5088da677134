package informer

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/kubewire/kubewire/informer/raw"
)

// The informer of a resource is client-go's Reflector and controller
// (cache.New) writing into a notifyQueue, rather than a
// SharedIndexInformer. The shared informer moves every event through three
// hand-offs: its RealFIFO, a batch applied to the store, and a
// processorListener's buffer for each handler. Each of them computes the
// object's key again (cache.MetaNamespaceKeyFunc, an allocation each
// time), boxes the event into a new interface value, and, while the
// handler is behind, starts a trace per item. kubewire has one handler per
// informer and no indexers, so one queue does what the three did:
//
//   - The reflector's goroutine applies each event to the store at once
//     and queues the notification, as the shared informer's store runs
//     ahead of its listener. The handler still sees every change in the
//     order the reflector saw it, and the store may be newer than the
//     handler (which is why snapshots read lastSeen, not the store).
//   - The controller's goroutine pops notifications one at a time and
//     hands them to the handler, which must not block.
//   - A relist (Replace) turns into the notifications client-go's atomic
//     RealFIFO gives for it: a DeletedFinalStateUnknown for each stored
//     object the list lacks, then an update or add for each listed one.
//   - HasSynced turns true once the notifications of the first list have
//     been handled, as a handler registration's HasSynced does.
//
// Keys come from storeKey: a raw Object carries its key, built with it.

// notifyKind is the handler method a notification is for.
type notifyKind uint8

const (
	notifyAdd notifyKind = iota
	notifyUpdate
	notifyDelete
	// notifyGap hands the handler a *Gap found by the list that follows.
	notifyGap
	// notifyListed says a list's notifications are all queued before it;
	// obj is the list's resourceVersion.
	notifyListed
	// notifyBookmark: the watch has nothing older left; obj is the
	// bookmark's resourceVersion.
	notifyBookmark
)

// notification is one handler call. It is queued by value: queueing costs
// no allocation beyond the queue's amortised growth.
type notification struct {
	kind notifyKind
	// initial marks an add of the first list (isInInitialList).
	initial bool
	// listed marks the notifications of a list, whose versions are not in
	// the order of the stream.
	listed bool
	obj    any
	// old is the previous state, for updates.
	old any
}

// storeKey is cache.DeletionHandlingMetaNamespaceKeyFunc, without its
// allocation for raw Objects, which carry their key.
func storeKey(obj any) (string, error) {
	switch o := obj.(type) {
	case *raw.Object:
		return o.Key(), nil
	case cache.DeletedFinalStateUnknown:
		return o.Key, nil
	}
	return cache.MetaNamespaceKeyFunc(obj)
}

// notifyQueue is the store of an informer and the queue of notifications
// for its handler: the reflector writes to it (cache.ReflectorStore), and
// the controller pops from it (cache.Queue).
type notifyQueue struct {
	name      string
	store     cache.Store
	transform cache.TransformFunc

	mu   sync.Mutex
	cond sync.Cond
	// items[head:] are the notifications not yet popped.
	items  []notification
	head   int
	closed bool
	// populated is set by the first change of any kind; initial counts the
	// notifications of the first list still to be handled.
	populated bool
	initial   int
	synced    chan struct{}
	isSynced  bool

	// busy is set while the handler works on a popped notification.
	busy bool
	// onReplace, if set, is called when a list's result is applied.
	onReplace func()
	// takeGaps, if set, gives the gaps the list being applied found; they
	// are queued before its notifications.
	takeGaps func() []Gap

	// cur is the notification being handled. Pop hands the handler a
	// pointer to it, which fits in an interface without an allocation;
	// only the controller's goroutine touches it.
	cur notification
}

var (
	_ cache.Queue                  = (*notifyQueue)(nil)
	_ cache.TransformingStore      = (*notifyQueue)(nil)
	_ cache.ReflectorBookmarkStore = (*notifyQueue)(nil)
	_ cache.DoneChecker            = (*notifyQueue)(nil)
)

func newNotifyQueue(name string, transform cache.TransformFunc) *notifyQueue {
	q := &notifyQueue{
		name:      name,
		store:     cache.NewStore(storeKey),
		transform: transform,
		synced:    make(chan struct{}),
	}
	q.cond.L = &q.mu
	return q
}

// Transformer lets the reflector transform the objects of a streamed list
// as they arrive (cache.TransformingStore). Replace transforms them again,
// as client-go's RealFIFO does: a transform must be idempotent.
func (q *notifyQueue) Transformer() cache.TransformFunc { return q.transform }

func (q *notifyQueue) transformed(obj any) (any, error) {
	if _, tombstone := obj.(cache.DeletedFinalStateUnknown); tombstone || q.transform == nil {
		return obj, nil
	}
	return q.transform(obj)
}

// push queues n. The caller holds mu.
func (q *notifyQueue) push(n notification) {
	if len(q.items) == cap(q.items) && q.head > 0 {
		// Reuse the popped front rather than grow, so that a backlog
		// costs at most twice its size whatever its history.
		m := copy(q.items, q.items[q.head:])
		clear(q.items[m:])
		q.items, q.head = q.items[:m], 0
	}
	q.items = append(q.items, n)
	q.cond.Signal()
}

// populate records the first change. The caller holds mu.
func (q *notifyQueue) populate() {
	if !q.populated {
		q.populated = true
		q.checkSynced()
	}
}

// checkSynced closes synced once the first list is handled. The caller
// holds mu.
func (q *notifyQueue) checkSynced() {
	if q.populated && q.initial == 0 && !q.isSynced {
		q.isSynced = true
		close(q.synced)
	}
}

// Add and Update apply a watched object and queue an add, or an update
// from the state stored before. Delete removes a watched object and queues
// its delete, with the state the watch event carries.
func (q *notifyQueue) Add(obj any) error    { return q.apply(obj, false) }
func (q *notifyQueue) Update(obj any) error { return q.apply(obj, false) }
func (q *notifyQueue) Delete(obj any) error { return q.apply(obj, true) }

// apply is Add and Update, or Delete when deleted is true.
func (q *notifyQueue) apply(obj any, deleted bool) error {
	obj, err := q.transformed(obj)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.populate()
	if deleted {
		if err := q.store.Delete(obj); err != nil {
			return err
		}
		q.push(notification{kind: notifyDelete, obj: obj})
		return nil
	}
	old, exists, err := q.store.Get(obj)
	if err != nil {
		return err
	}
	if exists {
		if err := q.store.Update(obj); err != nil {
			return err
		}
		q.push(notification{kind: notifyUpdate, obj: obj, old: old})
		return nil
	}
	if err := q.store.Add(obj); err != nil {
		return err
	}
	q.push(notification{kind: notifyAdd, obj: obj})
	return nil
}

// Replace applies a list. A stored object the list lacks was deleted while
// no watch saw it: its delete is queued as a DeletedFinalStateUnknown with
// the last state stored, before the list's own notifications, in the
// order client-go's RealFIFO queues them. The objects of the first list are
// the initial list (isInInitialList).
func (q *notifyQueue) Replace(list []any, resourceVersion string) error {
	if q.onReplace != nil {
		defer q.onReplace()
	}
	objs := make([]any, len(list))
	for i, obj := range list {
		var err error
		if objs[i], err = q.transformed(obj); err != nil {
			return err
		}
	}
	var gaps []Gap
	if q.takeGaps != nil {
		gaps = q.takeGaps()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	initial := !q.populated
	for i := range gaps {
		q.push(notification{kind: notifyGap, obj: &gaps[i]})
	}
	keys := sets.New[string]()
	notes := make([]notification, 0, len(objs))
	for _, obj := range objs {
		key, err := storeKey(obj)
		if err != nil {
			return cache.KeyError{Obj: obj, Err: err}
		}
		keys.Insert(key)
		if old, exists, _ := q.store.GetByKey(key); exists {
			notes = append(notes, notification{kind: notifyUpdate, obj: obj, old: old, listed: true})
		} else {
			notes = append(notes, notification{kind: notifyAdd, obj: obj, initial: initial, listed: true})
		}
	}
	for _, key := range q.store.ListKeys() {
		if keys.Has(key) {
			continue
		}
		old, _, _ := q.store.GetByKey(key)
		q.push(notification{kind: notifyDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: old}, listed: true})
	}
	if err := q.store.Replace(objs, resourceVersion); err != nil {
		return err
	}
	for _, n := range notes {
		q.push(n)
	}
	q.push(notification{kind: notifyListed, obj: resourceVersion})
	if initial {
		q.populated, q.initial = true, len(notes)
		q.checkSynced()
	}
	return nil
}

// Resync queues an update of every stored object to itself, as the atomic
// RealFIFO does. Nothing asks for it: the informer has no resync period.
func (q *notifyQueue) Resync() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, obj := range q.store.List() {
		q.push(notification{kind: notifyUpdate, obj: obj, old: obj})
	}
	return nil
}

// Bookmark passes a bookmark's resourceVersion to the store, which reports
// it as its LastStoreSyncResourceVersion.
func (q *notifyQueue) Bookmark(resourceVersion string) error {
	q.store.Bookmark(resourceVersion)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.push(notification{kind: notifyBookmark, obj: resourceVersion})
	return nil
}

// Pop waits for the next notification and calls process with it, as a
// *notification, and whether it is an add of the initial list. It returns
// cache.ErrFIFOClosed once the queue is closed and empty.
func (q *notifyQueue) Pop(process cache.PopProcessFunc) (any, error) {
	q.mu.Lock()
	for q.head == len(q.items) {
		if q.closed {
			q.mu.Unlock()
			return nil, cache.ErrFIFOClosed
		}
		q.cond.Wait()
	}
	q.cur = q.items[q.head]
	// Drop the queue's reference, so that a handled object is not kept
	// alive by a backlog behind it.
	q.items[q.head] = notification{}
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.busy = true
	q.mu.Unlock()

	err := process(&q.cur, q.cur.initial)

	q.mu.Lock()
	q.busy = false
	if q.initial > 0 && q.cur.initial {
		q.initial--
		q.checkSynced()
	}
	q.mu.Unlock()
	q.cur = notification{}
	return nil, err
}

// idle reports whether nothing is queued and the handler is not working.
func (q *notifyQueue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head == len(q.items) && !q.busy
}

// Close makes Pop return once the queue is empty.
func (q *notifyQueue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// HasSynced reports whether the first list has been handled.
func (q *notifyQueue) HasSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.isSynced
}

func (q *notifyQueue) HasSyncedChecker() cache.DoneChecker { return q }

// Name and Done make the queue its own cache.DoneChecker.
func (q *notifyQueue) Name() string          { return q.name }
func (q *notifyQueue) Done() <-chan struct{} { return q.synced }

// resourceInformer runs the reflector and controller of one resource into
// a notifyQueue and hands its notifications to a handler.
type resourceInformer struct {
	queue      *notifyQueue
	controller cache.Controller
	handler    cache.ResourceEventHandler
	// stream, if set, is told what the queue says about the stream
	// itself, and whether each object notification comes from a list.
	stream streamHandler
}

// streamHandler takes the notifications that are about the watch stream
// rather than one object. It runs on the handler's goroutine.
type streamHandler interface {
	// fromList is called before each object notification.
	fromList(listed bool)
	// reached: the stream has delivered everything up to rv (a list's
	// end when listed, else a bookmark).
	reached(rv string, listed bool)
	// gap: versions in the gap may be missing; the list follows.
	gap(g *Gap)
}

// newResourceInformer builds the informer of lw, whose objects are of
// example's type; transform, if set, runs on every object before it is
// stored. handler is called from one goroutine, one notification at a
// time, and must not block; onError is the reflector's
// WatchErrorHandlerWithContext.
func newResourceInformer(name string, lw cache.ListerWatcher, example runtime.Object, transform cache.TransformFunc,
	handler cache.ResourceEventHandler, onError cache.WatchErrorHandlerWithContext,
) *resourceInformer {
	i := &resourceInformer{queue: newNotifyQueue("informer "+name, transform), handler: handler}
	i.controller = cache.New(&cache.Config{
		Queue:                        i.queue,
		ListerWatcher:                lw,
		ObjectType:                   example,
		ObjectDescription:            name,
		Process:                      i.process,
		WatchErrorHandlerWithContext: onError,
	})
	return i
}

// Run lists, watches and hands notifications to the handler until ctx
// ends; what is still queued then is dropped.
func (i *resourceInformer) Run(ctx context.Context) { i.controller.RunWithContext(ctx) }

// GetStore is the informer's cache of the resource. It may be ahead of
// the handler.
func (i *resourceInformer) GetStore() cache.Store { return i.queue.store }

// HasSynced reports whether the handler has been given the first list.
func (i *resourceInformer) HasSynced() bool { return i.queue.HasSynced() }

// process hands one popped notification to the handler.
func (i *resourceInformer) process(obj any, initial bool) error {
	n, ok := obj.(*notification)
	if !ok {
		return fmt.Errorf("informer: popped %T, not a notification", obj)
	}
	if i.stream != nil {
		switch n.kind {
		case notifyGap:
			i.stream.gap(n.obj.(*Gap))
			return nil
		case notifyListed, notifyBookmark:
			i.stream.reached(n.obj.(string), n.kind == notifyListed)
			return nil
		}
		i.stream.fromList(n.listed)
	}
	switch n.kind {
	case notifyAdd:
		i.handler.OnAdd(n.obj, initial)
	case notifyUpdate:
		i.handler.OnUpdate(n.old, n.obj)
	case notifyDelete:
		i.handler.OnDelete(n.obj)
	}
	return nil
}
