package httpsink_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func change(name string, rv int) *informer.Change {
	return sinktest.Change(informer.OpUpdated, "team-a", name, rv)
}

func mustEvent(t *testing.T, c *informer.Change) *encoding.Event {
	t.Helper()
	ev, err := encoding.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func ids[E interface{ ID() string }](evs []E) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID()
	}
	return out
}

func TestEachStatusMapsToRetryPermanentOrTooLarge(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	type want int
	const (
		retry want = iota
		permanent
		tooLargePermanent
	)
	cases := []struct {
		name   string
		codes  []int
		mode   string
		expect want
	}{
		{"500 is retried.", []int{500}, "", retry},
		{"503 is retried.", []int{503}, "", retry},
		{"429 is retried.", []int{429}, "", retry},
		{"408 is retried.", []int{408}, "", retry},
		{"404 is retried, as Knative's contract asks (a broker not ready yet).", []int{404}, "", retry},
		{"409 is retried, as Knative's contract asks.", []int{409}, "", retry},
		{"401 is retried: the cure is a credential, not the event.", []int{401}, "", retry},
		{"403 is retried: the cure is a permission, not the event.", []int{403}, "", retry},
		{"A redirect is not followed and is retried.", []int{307}, "", retry},
		{"400 is permanent.", []int{400}, "", permanent},
		{"422 is permanent.", []int{422}, "", permanent},
		{"415 is permanent.", []int{415}, "", permanent},
		{"413 for the event and for its reference is too large, permanently.", []int{413, 413}, "", tooLargePermanent},
		{"413 in structured mode likewise.", []int{413, 413}, config.ContentModeStructured, tooLargePermanent},
		// The receiver did not say which event of the batch it refused:
		// each goes again alone, and only those refused alone are dropped.
		{"400 for a batch and for each of its events alone is permanent.", []int{400, 400, 400}, httpsink.ContentModeBatched, permanent},
		{"503 for a batch is retried.", []int{503}, httpsink.ContentModeBatched, retry},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, ContentMode: c.mode})
			ctx := connect(t, s)
			evs := []*encoding.Event{mustEvent(t, change("a", 1)), mustEvent(t, change("b", 1))}
			rcv.Fail(c.codes...)
			err := s.Write(ctx, evs)
			var se *httpsink.StatusError
			if !errors.As(err, &se) || se.Code != c.codes[len(c.codes)-1] {
				t.Fatalf("Write = %v; want a *StatusError with code %d", err, c.codes[len(c.codes)-1])
			}
			switch c.expect {
			case retry:
				if errors.Is(err, sinks.ErrPermanent) || errors.Is(err, sinks.ErrTooLarge) {
					t.Fatalf("Write = %v; want a plain error the dispatcher retries", err)
				}
				// The retry the dispatcher makes then succeeds.
				if err := s.Write(ctx, evs); err != nil {
					t.Fatalf("the retry: %v", err)
				}
				if got := ids(rcv.Events(path)); !strings.Contains(fmt.Sprint(got), evs[1].ID()) {
					t.Fatalf("after the retry the receiver holds %v", got)
				}
			case permanent:
				if !errors.Is(err, sinks.ErrPermanent) || errors.Is(err, sinks.ErrTooLarge) {
					t.Fatalf("Write = %v; want sinks.ErrPermanent", err)
				}
			case tooLargePermanent:
				if !errors.Is(err, sinks.ErrPermanent) || !errors.Is(err, sinks.ErrTooLarge) {
					t.Fatalf("Write = %v; want sinks.ErrTooLarge and sinks.ErrPermanent", err)
				}
			}
		})
	}
}

func TestA500IsRetriedByTheDispatcherAndTheEventsAreThenDelivered(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	path := freshPath()
	s := newSink(t, &httpsink.Config{URL: rcv.URL() + path})
	rcv.Fail(500, 500, 429)
	d := dispatch.NewDispatcher("http-retry", s, dispatch.Options{Shards: 1, RetryInitial: time.Millisecond, RetryMax: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))})
	d.Start()
	var sent []*encoding.Event
	for rv := 1; rv <= 3; rv++ {
		d.Enqueue(dispatch.NewItem(change("a", rv)))
		sent = append(sent, mustEvent(t, change("a", rv)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := d.Close(ctx); n != 0 {
		t.Fatalf("%d events undelivered", n)
	}
	if got, want := fmt.Sprint(ids(rcv.Events(path))), fmt.Sprint(ids(sent)); got != want {
		t.Fatalf("received %s, want %s in order", got, want)
	}
	if posts := len(rcv.Posts(path)); posts < len(sent)+3 {
		t.Fatalf("%d POSTs; want the three refused ones and at least one per event", posts)
	}
}

func TestAnEventRefusedAsTooLargeGoesAsItsReferenceAndABatchIsSplit(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	for _, mode := range []string{config.ContentModeBinary, httpsink.ContentModeBatched} {
		t.Run(mode, func(t *testing.T) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, ContentMode: mode})
			ctx := connect(t, s)
			sent := []*encoding.Event{mustEvent(t, change("a", 1)), mustEvent(t, change("a", 2)), mustEvent(t, change("a", 3))}
			// Binary: the second event is refused. Batched: the batch, then
			// the second event alone. 0 lets a request through.
			rcv.Fail(map[string][]int{config.ContentModeBinary: {0, 413}, httpsink.ContentModeBatched: {413, 0, 413}}[mode]...)
			if err := s.Write(ctx, sent); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got := rcv.Events(path)
			if fmt.Sprint(ids(got)) != fmt.Sprint(ids(sent)) {
				t.Fatalf("received %v, want %v in order", ids(got), ids(sent))
			}
			if p, _ := got[1].Extensions()[encoding.ExtPayload].(string); p != encoding.PayloadReference {
				t.Errorf("the refused event arrived with payload=%q, want its reference", p)
			}
			if p := got[0].Extensions()[encoding.ExtPayload]; p != nil {
				t.Errorf("an event that fit arrived as a reference")
			}
		})
	}
}

func TestAFailedRequestStopsTheWriteSoNoLaterEventOfAKeyGoesFirst(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	path := freshPath()
	s := newSink(t, &httpsink.Config{URL: rcv.URL() + path})
	ctx := connect(t, s)
	sent := []*encoding.Event{mustEvent(t, change("a", 1)), mustEvent(t, change("a", 2)), mustEvent(t, change("b", 1))}
	rcv.Fail(0, 503)
	if err := s.Write(ctx, sent); err == nil {
		t.Fatal("Write succeeded though the receiver refused the second event")
	}
	if got := ids(rcv.Events(path)); fmt.Sprint(got) != fmt.Sprint(ids(sent[:1])) {
		t.Fatalf("after the failure the receiver holds %v; want only the first event", got)
	}
	if err := s.Write(ctx, sent); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got, want := fmt.Sprint(ids(rcv.Events(path))), fmt.Sprint(append(ids(sent[:1]), ids(sent)...)); got != want {
		t.Fatalf("received %s, want %s (the first one twice)", got, want)
	}
}

func TestWriteReturnsWhenItsContextEndsAndWhenTheTimeoutPasses(t *testing.T) {
	arrived := make(chan struct{}, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		// With the body read, the server notices the client hanging up
		// and ends the request's context.
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done() // never answers
	}))
	t.Cleanup(srv.Close)
	ev := mustEvent(t, change("a", 1))

	t.Run("The caller's context.", func(t *testing.T) {
		s := newSink(t, &httpsink.Config{URL: srv.URL})
		connect(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.Write(ctx, []*encoding.Event{ev}) }()
		<-arrived
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) || errors.Is(err, sinks.ErrPermanent) {
				t.Fatalf("Write = %v; want context.Canceled, not permanent", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Write did not return after its context was cancelled")
		}
	})
	t.Run("The configured timeout.", func(t *testing.T) {
		s := newSink(t, &httpsink.Config{URL: srv.URL, Timeout: config.NewDuration(100 * time.Millisecond)})
		ctx := connect(t, s)
		err := s.Write(ctx, []*encoding.Event{ev})
		<-arrived
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timeout (100ms)") || errors.Is(err, sinks.ErrPermanent) {
			t.Fatalf("Write = %v; want a retryable error naming the timeout", err)
		}
	})
}

func TestConnectFailsOnlyWhenTheReceiverCannotBeReached(t *testing.T) {
	t.Run("Any HTTP answer to the probe will do.", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no OPTIONS here", http.StatusMethodNotAllowed)
		}))
		t.Cleanup(srv.Close)
		connect(t, newSink(t, &httpsink.Config{URL: srv.URL}))
	})
	t.Run("Nothing listening fails, and so do Writes until Connect succeeds.", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		s := newSink(t, &httpsink.Config{URL: "http://" + addr + "/events"})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = s.Connect(ctx)
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("Connect = %v; want connection refused", err)
		}
		if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); err == nil || errors.Is(err, sinks.ErrPermanent) {
			t.Fatalf("Write before a successful Connect = %v; want a retryable error", err)
		}
	})
	t.Run("Write after Close wraps ErrClosed.", func(t *testing.T) {
		rcv := startReceiver(t, receiverOptions{})
		s := newSink(t, &httpsink.Config{URL: rcv.URL()})
		ctx := connect(t, s)
		s.Close(ctx)
		if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); !errors.Is(err, httpsink.ErrClosed) {
			t.Fatalf("Write after Close = %v; want ErrClosed", err)
		}
		if err := s.Connect(ctx); !errors.Is(err, httpsink.ErrClosed) {
			t.Fatalf("Connect after Close = %v; want ErrClosed", err)
		}
	})
}

// A Write reports each event's outcome: what the receiver took is not
// written again, a refusal drops its event alone, and after a failure that
// may pass nothing later goes out ahead of the failed event.
func TestAWriteReportsEachEventsOutcome(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	cases := []struct {
		name  string
		codes []int
		want  []string // per event: ok, permanent, retry or notsent
		got   []int    // which events the receiver holds
	}{
		{"A refused event is refused alone and the Write goes on.", []int{0, 400}, []string{"ok", "permanent", "ok"}, []int{0, 2}},
		{"After a failure to retry nothing later is sent.", []int{0, 503}, []string{"ok", "retry", "notsent"}, []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := freshPath()
			s := newSink(t, &httpsink.Config{URL: rcv.URL() + path})
			ctx := connect(t, s)
			evs := []*encoding.Event{mustEvent(t, change("a", 1)), mustEvent(t, change("b", 1)), mustEvent(t, change("c", 1))}
			rcv.Fail(c.codes...)
			err := s.Write(ctx, evs)
			var be *sinks.BatchError
			if !errors.As(err, &be) || be.Len() != len(evs) {
				t.Fatalf("Write = %v; want a BatchError over %d events", err, len(evs))
			}
			for i, w := range c.want {
				ierr := be.Err(i)
				var ok bool
				switch w {
				case "ok":
					ok = ierr == nil
				case "permanent":
					ok = errors.Is(ierr, sinks.ErrPermanent)
				case "retry":
					ok = ierr != nil && !errors.Is(ierr, sinks.ErrPermanent) && !errors.Is(ierr, sinks.ErrNotSent)
				case "notsent":
					ok = errors.Is(ierr, sinks.ErrNotSent)
				}
				if !ok {
					t.Errorf("event %d: %v; want %s", i, ierr, w)
				}
			}
			var want []string
			for _, i := range c.got {
				want = append(want, evs[i].ID())
			}
			if got := ids(rcv.Events(path)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the receiver holds %v; want %v", got, want)
			}
		})
	}
}
