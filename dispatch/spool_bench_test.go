package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
)

// BenchmarkSpool measures the disk spool alone, for each fsync policy: write
// is encoding a 2 KB ConfigMap's event into a record and appending it; drain
// is reading a record back and decoding its event. ns/op is the time per
// event; MB/s counts the record bytes.
func BenchmarkSpool(b *testing.B) {
	k := benchdata.ConfigMaps
	r := informer.NewResource("bench", k.GVR, k.Kind, k.Namespaced)
	u := k.Cached(benchdata.DefaultSeed, 0, 2)
	it := dispatch.NewItem(&informer.Change{Op: informer.OpUpdated, Resource: r, Key: r.ObjectKey(u.GetNamespace(), u.GetName()), Object: informer.FromUnstructured(u), Observed: time.Now()})
	rec, err := dispatch.SpoolRecord(it)
	if err != nil {
		b.Fatal(err)
	}
	for _, fsync := range []string{config.FsyncAlways, config.FsyncInterval, config.FsyncNever} {
		open := func(b *testing.B) *dispatch.TestSpool {
			s, err := dispatch.OpenTestSpool(spool.Options{Dir: b.TempDir(), MaxBytes: 1 << 40, Fsync: fsync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}
		b.Run(fsync+"/write", func(b *testing.B) {
			s := open(b)
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				rec, err := dispatch.SpoolRecord(it)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Put(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fsync+"/drain", func(b *testing.B) {
			s := open(b)
			n := b.N
			for range n {
				if err := s.Put(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			b.ResetTimer()
			for range n {
				if _, err := s.Next(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
