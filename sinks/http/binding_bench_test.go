package httpsink

import (
	"testing"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// This file is in the package itself because the binding is unexported.

// BenchmarkBinding is what the sink adds per event before the socket: the
// binary mode's request head as the sink writes it on its own connections,
// the same headers as a map for net/http (the path through a proxy), or the
// structured mode's body.
func BenchmarkBinding(b *testing.B) {
	ss, err := New("bench", &Config{URL: "http://127.0.0.1:1/events"}, sinks.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	s := ss.(*Sink)
	for _, k := range benchdata.Kinds {
		ev := sinktest.BenchEvent(b, k)
		b.Run("binary/"+k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			var head []byte
			for b.Loop() {
				ct, err := binaryContentType(ev)
				if err != nil {
					b.Fatal(err)
				}
				head = s.appendHead(head[:0], &request{binary: ev, contentType: ct, body: ev.Data()}, nil)
			}
		})
		b.Run("binary-header-map/"+k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				_ = binaryHeader(ev, 3)
			}
		})
		b.Run("structured/"+k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := structuredBody(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
