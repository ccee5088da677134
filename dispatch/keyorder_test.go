package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/internal/testing/testkit/memsink"
	"github.com/kubewire/kubewire/sinks"
)

// firstCopiesInOrder checks the order the crash tests hold a broker to:
// taking only the first copy of each event id, each key's versions
// increase. A later copy of an id is a retry's duplicate, which consumers
// skip. It names the first key that breaks it, with its versions.
func firstCopiesInOrder(evs []*encoding.Event) error {
	seen := map[string]bool{}
	first, all := map[string][]int{}, map[string][]int{}
	var broken string
	for _, ev := range evs {
		k := key(ev)
		all[k] = append(all[k], rvOf(ev))
		if seen[ev.ID()] {
			continue
		}
		seen[ev.ID()] = true
		if vs := first[k]; broken == "" && len(vs) > 0 && rvOf(ev) <= vs[len(vs)-1] {
			broken = k
		}
		first[k] = append(first[k], rvOf(ev))
	}
	if broken != "" {
		return fmt.Errorf("key %s reached the broker as rv %v; the first copy of each id as rv %v", broken, all[broken], first[broken])
	}
	return nil
}

// refusesRV1 refuses every rv 1 for good and acknowledges the rest. With
// atDrain it answers a Write only once the Write's context ends, that is
// once shutdown cancels writes: its refusal then comes as the drain gives
// up, and the dispatcher cannot tell it from one the cancellation caused.
type refusesRV1 struct {
	memsink.Sink
	atDrain bool

	mu     sync.Mutex
	got    []*encoding.Event
	writes atomic.Int32
}

func (s *refusesRV1) Write(ctx context.Context, evs []*encoding.Event) error {
	s.writes.Add(1)
	if s.atDrain {
		<-ctx.Done()
	}
	be := sinks.NewBatchError(len(evs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ev := range evs {
		if rvOf(ev) == 1 {
			be.Failed(i, sinks.Permanent(errors.New("refused")))
			continue
		}
		s.got = append(s.got, ev)
	}
	return be.ErrorOrNil()
}

func (s *refusesRV1) acknowledged() []*encoding.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// Issue 46: a key reached the broker as rv 2, 1, 2. Its rv 1 was refused,
// and its rv 2 acknowledged, in one Write that ended as shutdown cancelled
// writes; a refusal then is not trusted, so rv 1 was kept for the next
// start, and written there after the rv 2 the broker already had. Whether
// the refusal comes before the drain gives up or as it does (a race in a
// real process), each key's versions must increase across both starts, and
// the key must end at its newest change.
func TestAKeysVersionsIncreaseAcrossARestartWhenItsRefusalMeetsTheShutdownDrain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atDrain bool
	}{
		{"The refusal comes before shutdown, and is trusted.", false},
		{"The refusal comes as the drain cancels writes, and is not trusted.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opt := oneBatch()
			opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			useSpool := func(d *dispatch.Dispatcher) *dispatch.Dispatcher {
				if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
					t.Fatal(err)
				}
				return d
			}
			first := &refusesRV1{atDrain: tc.atDrain}
			d := started(useSpool(dispatch.NewDispatcher("refusal-drain", first, opt)),
				change(informer.OpUpdated, "a", 1), change(informer.OpUpdated, "a", 2))
			ctx, cancel := context.WithCancel(context.Background())
			if tc.atDrain {
				// A drain deadline already past: Close cancels the Write
				// the sink is holding at once.
				testkit.Eventually(t, "the first write", func() bool { return first.writes.Load() > 0 })
				cancel()
			} else {
				testkit.Eventually(t, "rv 2 acknowledged", func() bool { return len(first.acknowledged()) > 0 })
			}
			d.Close(ctx)
			cancel()

			second := &memsink.Sink{}
			d2 := dispatch.NewDispatcher("refusal-drain", second, opt)
			useSpool(d2).Start()
			testkit.Eventually(t, "the spool replayed", func() bool {
				select {
				case <-d2.Replayed():
					return true
				default:
					return false
				}
			})
			if n := d2.Close(context.Background()); n != 0 {
				t.Fatalf("undelivered: %d", n)
			}
			evs := append(first.acknowledged(), second.Events()...)
			if err := firstCopiesInOrder(evs); err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 || rvOf(evs[len(evs)-1]) != 2 {
				t.Fatalf("the key's events across both starts were %s; want it to end at rv 2", idsOf(evs))
			}
		})
	}
}
