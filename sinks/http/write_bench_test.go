package httpsink_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// BenchmarkWrite is the whole round trip of Write on loopback, against a
// receiver that reads the body and answers 202: building the request,
// net/http on both sides, the response. allocs/op counts both sides, since
// the receiver runs in the same process; the baseline case, a bare
// net/http POST of the same data, shows how much of it is net/http's and
// the receiver's. The batched case writes 100 events per op and reports
// per-event figures too.
func BenchmarkWrite(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	b.Cleanup(srv.Close)
	ev := sinktest.BenchEvent(b, benchdata.Pods)
	b.Run("baseline", func(b *testing.B) {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.SetBytes(int64(len(ev.Data())))
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Post(srv.URL+"/events", "application/json", bytes.NewReader(ev.Data()))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	for _, c := range []struct {
		mode string
		n    int
	}{{config.ContentModeBinary, 1}, {config.ContentModeStructured, 1}, {httpsink.ContentModeBatched, 100}} {
		b.Run(c.mode, func(b *testing.B) {
			s, err := httpsink.New("bench", &httpsink.Config{URL: srv.URL + "/events", ContentMode: c.mode}, sinks.Deps{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := s.Connect(ctx); err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			evs := make([]*encoding.Event, c.n)
			for i := range evs {
				evs[i] = ev
			}
			b.SetBytes(int64(c.n * len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Write(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			if c.n > 1 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.n), "ns/event")
			}
		})
	}
}

// BenchmarkWriteParallel is Write in binary mode from as many goroutines as
// the dispatcher has shards (16 by default), one event per Write, as a
// saturated sink is written: the case where Writes contend for connections.
func BenchmarkWriteParallel(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	b.Cleanup(srv.Close)
	ev := sinktest.BenchEvent(b, benchdata.Pods)
	s, err := httpsink.New("bench", &httpsink.Config{URL: srv.URL + "/events"}, sinks.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	b.SetParallelism(8) // 8 × GOMAXPROCS 2 = 16 writers
	b.SetBytes(int64(len(ev.Data())))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		evs := []*encoding.Event{ev}
		for pb.Next() {
			if err := s.Write(ctx, evs); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
