package raw

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/kubewire/kubewire/internal/base/shape"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// BenchmarkHeapPerCachedObject measures the heap each cached object retains
// at N = 10k, on both cache paths: bytes/object, and that divided by the
// object's JSON as served (managedFields included). Run with -benchtime=1x;
// the figure does not depend on b.N.
func BenchmarkHeapPerCachedObject(b *testing.B) {
	const n = 10_000
	for _, k := range []benchdata.Kind{benchdata.Pods, benchdata.ConfigMaps} {
		in := make([][]byte, n)
		total := 0
		for i := range in {
			in[i] = k.JSON(benchdata.DefaultSeed, i, int64(i+1))
			total += len(in[i])
		}
		strip := shape.NewTransform(true, nil)
		modes := []struct {
			name  string
			build func([]byte) any
		}{
			{"raw", func(j []byte) any {
				o, err := New(j, BuildOptions{})
				if err != nil {
					b.Fatal(err)
				}
				return o
			}},
			{"unstructured", func(j []byte) any {
				u := benchdata.Decode(j)
				if _, err := strip(u); err != nil {
					b.Fatal(err)
				}
				return u
			}},
		}
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/%s/N=%d", k.Name, m.name, n), func(b *testing.B) {
				var per float64
				for b.Loop() {
					kept := make([]any, n)
					before := heap()
					for i := range kept {
						kept[i] = m.build(in[i])
					}
					per = float64(heap()-before) / n
					runtime.KeepAlive(kept)
				}
				b.ReportMetric(per, "B/object")
				b.ReportMetric(per/(float64(total)/n), "x-json")
			})
		}
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
