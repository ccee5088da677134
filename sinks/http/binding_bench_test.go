package httpsink

import (
	"testing"

	"github.com/kubewire/kubewire/internal/benchdata"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// This file is in the package itself because the binding is unexported.

// BenchmarkBinding is what the sink adds per event before net/http takes
// over: the binary mode's headers, or the structured mode's body.
func BenchmarkBinding(b *testing.B) {
	for _, k := range benchdata.Kinds {
		ev := sinktest.BenchEvent(b, k)
		b.Run("binary/"+k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(ev.Data())))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := binaryHeader(ev, 3); err != nil {
					b.Fatal(err)
				}
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
