package raw

import (
	"testing"

	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// BenchmarkNew builds each benchmark kind's object as a watch event does.
func BenchmarkNew(b *testing.B) {
	for _, k := range benchdata.Kinds {
		in := k.JSON(benchdata.DefaultSeed, 1, 5)
		b.Run(k.Name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(in, BuildOptions{KeyPrefix: k.Name}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
