package dispatch_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/dispatch/spool"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
)

// A process killed before its spool's metadata was synced leaves data files
// the metadata does not describe (here: no metadata at all, and half a
// record at the end). The next start must count and read every complete
// record, and know exactly when it has read the last one.
func TestASpoolLeftByAKilledProcessIsReadWhole(t *testing.T) {
	dir := t.TempDir()
	killed, err := dispatch.OpenTestSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncNever})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var size int64
	for rv := 1; rv <= n; rv++ {
		rec, err := dispatch.SpoolRecord(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
		if err != nil {
			t.Fatal(err)
		}
		if err := killed.Put(rec); err != nil {
			t.Fatal(err)
		}
		size += int64(len(rec)) + 4
	}
	// Never closed or synced, as after SIGKILL: the data is in the file,
	// the metadata is not on disk. A kill mid-write leaves a partial record.
	data, _ := filepath.Glob(filepath.Join(dir, "seg-*.diskqueue.000000.dat"))
	if len(data) != 1 {
		t.Fatalf("data files %v", data)
	}
	if metas, _ := filepath.Glob(filepath.Join(dir, "*.meta.dat")); len(metas) != 0 {
		t.Fatalf("the metadata was synced (%v); the test needs it missing", metas)
	}
	f, err := os.OpenFile(data[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 'x'})
	f.Close()

	s, err := dispatch.OpenTestSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Depth(); got != n {
		t.Fatalf("depth %d after the restart, want the %d complete records", got, n)
	}
	if got := s.Bytes(); got != size {
		t.Fatalf("the restart counts %d bytes against the bound, want %d", got, size)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rv := 1; rv <= n; rv++ {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("record %d: %v", rv, err)
		}
		if got := rvOf(ev); got != rv {
			t.Fatalf("record %d holds rv %d", rv, got)
		}
	}
	if got := s.Depth(); got != 0 {
		t.Fatalf("depth %d after reading every record, want 0", got)
	}
	if got := s.Bytes(); got != 0 {
		t.Fatalf("%d bytes still counted after reading every record", got)
	}
}
