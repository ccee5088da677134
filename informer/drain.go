package informer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ErrNotDrained means that at shutdown the handler had not caught up with
// the notifications client-go had already queued for it when the drain time
// ran out: those changes never reached the Output.
var ErrNotDrained = errors.New("informer notifications still queued at the drain deadline")

// drainName names the sentinel object. No real object has it: a name never
// contains "/", and the store key it makes ("/kubewire-drain") cannot be a
// namespaced key either.
const drainName = "/kubewire-drain"

// drainSource wraps an informer's list and watch so that shutdown loses
// nothing the informer has queued. Cancelling the informer would discard
// its unbounded queue of notifications. Instead, stop closes the source:
// the watch stops forwarding and ends with one sentinel object; everything
// queued before the sentinel is handled before it (the queue is FIFO), so
// when the handler meets the sentinel the informer can be cancelled with
// nothing left behind. Lists and watches asked for after that block until
// the informer's context ends.
//
// One drainSource serves one informer, whose reflector runs one list or
// watch at a time.
type drainSource struct {
	sentinel runtime.Object
	stopped  chan struct{}
	stopOnce sync.Once
	// sent is set once the reflector has taken the sentinel.
	sent atomic.Bool
	// lists counts lists asked for whose result the queue has not yet
	// taken (Replace); watches counts watches the reflector has not yet
	// stopped, which it does only after it has queued every event it took
	// from them. With both at zero after stop, nothing more can reach the
	// queue (see quiet).
	lists, watches atomic.Int32
}

func newDrainSource(sentinel runtime.Object) *drainSource {
	return &drainSource{sentinel: sentinel, stopped: make(chan struct{})}
}

// stop closes the source; the current or next watch delivers the sentinel.
func (d *drainSource) stop() { d.stopOnce.Do(func() { close(d.stopped) }) }

func (d *drainSource) isStopped() bool {
	select {
	case <-d.stopped:
		return true
	default:
		return false
	}
}

// wrap returns lw with the drain behaviour. Callers apply
// cache.ToListWatcherWithWatchListSemantics to the result, so the
// reflector still sees whether the client can stream lists.
func (d *drainSource) wrap(lw *cache.ListWatch) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if d.isStopped() {
				// A relist now would only queue more. Without a watch the
				// sentinel cannot be delivered; the drain sees that nothing
				// is in flight (quiet).
				<-ctx.Done()
				return nil, ctx.Err()
			}
			d.lists.Add(1)
			obj, err := lw.ListWithContext(ctx, o)
			if err != nil {
				d.lists.Add(-1)
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if d.isStopped() {
				if d.sent.Load() {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return d.watch(nil), nil
			}
			d.watches.Add(1)
			inner, err := lw.WatchWithContext(ctx, o)
			if err != nil {
				d.watches.Add(-1)
				return nil, err
			}
			return d.watch(inner), nil
		},
		DisableChunking: lw.DisableChunking,
	}
}

// listed records that the queue took a list's result (Replace). A streamed
// list ends in a Replace too, without a list asked for: it is counted as
// its watch.
func (d *drainSource) listed() {
	for {
		n := d.lists.Load()
		if n <= 0 || d.lists.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// quiet reports whether no list or watch can still add to the queue. With
// withLists false, lists in flight are left out: before the first list is
// handled, a list only adds to a snapshot that will never complete, and an
// apiserver out of reach can hold one open for long.
func (d *drainSource) quiet(withLists bool) bool {
	return d.watches.Load() == 0 && (!withLists || d.lists.Load() == 0)
}

// watch forwards inner's events until the source stops, then ends with
// the sentinel. inner is nil for a watch started after the stop.
func (d *drainSource) watch(inner watch.Interface) watch.Interface {
	w := &drainWatch{d: d, out: make(chan watch.Event), done: make(chan struct{}), counted: inner != nil}
	stopInner := func() {}
	var in <-chan watch.Event
	if inner != nil {
		stopInner = sync.OnceFunc(inner.Stop)
		in = inner.ResultChan()
	}
	go w.run(in, stopInner)
	return w
}

type drainWatch struct {
	d    *drainSource
	out  chan watch.Event
	done chan struct{}
	once sync.Once
	// counted: the watch is in drainSource.watches until Stop.
	counted bool
}

func (w *drainWatch) ResultChan() <-chan watch.Event { return w.out }

// Stop is called by the reflector, when the watch ends or the informer
// stops.
func (w *drainWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		if w.counted {
			w.d.watches.Add(-1)
		}
	})
}

func (w *drainWatch) run(in <-chan watch.Event, stopInner func()) {
	defer close(w.out)
	defer stopInner()
	for {
		// A stop wins over an event that is ready at the same moment, so
		// the stream ends promptly however busy the watch is.
		select {
		case <-w.d.stopped:
			w.finish(stopInner)
			return
		default:
		}
		select {
		case <-w.d.stopped:
			w.finish(stopInner)
			return
		case <-w.done:
			return
		case e, ok := <-in:
			if !ok {
				// The server ended the watch; the reflector starts another.
				return
			}
			select {
			case w.out <- e:
			case <-w.done:
				return
			}
		}
	}
}

// finish stops the real watch, delivers the sentinel once per source, and
// keeps the stream open until the reflector stops it, so that it does not
// start another watch meanwhile.
func (w *drainWatch) finish(stopInner func()) {
	stopInner()
	if !w.d.sent.Load() {
		select {
		case w.out <- watch.Event{Type: watch.Added, Object: w.d.sentinel}:
			w.d.sent.Store(true)
		case <-w.done:
			return
		}
	}
	<-w.done
}

// drain closes the informer's source and waits, at most DrainTimeout, for
// the handler to meet the sentinel, which it does once every notification
// queued before it has reached the Output. Without a watch (an apiserver out
// of reach), no sentinel can come; the drain then ends as soon as nothing is
// in flight and the handler has emptied the queue, rather than spend the
// deadline that the sinks need. synced says the first list was handled.
func (w *Watcher) drain(synced bool) error {
	start := time.Now()
	w.source.stop()
	t := time.NewTimer(w.opt.DrainTimeout)
	defer t.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.drained:
			w.log.Debug("informer drained", "took", time.Since(start).Round(time.Millisecond))
			return nil
		case <-tick.C:
			// quiet before idle: once nothing is in flight, only the
			// handler can still change the queue, and only by emptying it.
			if w.source.quiet(synced) && w.informer.queue.idle() {
				w.log.Debug("informer drained with no watch open", "took", time.Since(start).Round(time.Millisecond))
				return nil
			}
		case <-t.C:
			w.log.Error("shutdown: notifications still queued for the sinks at the drain deadline; they are lost",
				"drainTimeout", w.opt.DrainTimeout)
			return fmt.Errorf("%s: %w after %s", w.name, ErrNotDrained, w.opt.DrainTimeout)
		}
	}
}

// isSentinel reports whether obj ends the stream, and if so records that
// the handler got there. The informer passes the very object the source
// sent (the transform keeps it), so identity is enough.
func (w *Watcher) isSentinel(obj any) bool {
	if w.source == nil || obj != any(w.source.sentinel) {
		return false
	}
	w.drainedOnce.Do(func() { close(w.drained) })
	return true
}
