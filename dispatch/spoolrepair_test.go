package dispatch_test

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// lastSpoolFile is the data file a dispatcher's spool in dir wrote last:
// the highest-numbered file of the newest segment of any resource.
func lastSpoolFile(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", "seg-*.diskqueue.*.dat"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no spool data file under %s (%v)", dir, err)
	}
	place := func(f string) (gen, n int64) {
		name, num, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".dat"), ".diskqueue.")
		gen, _ = strconv.ParseInt(strings.TrimPrefix(name, "seg-"), 10, 64)
		n, _ = strconv.ParseInt(num, 10, 64)
		return gen, n
	}
	return slices.MaxFunc(files, func(x, y string) int {
		gx, nx := place(x)
		gy, ny := place(y)
		return cmp.Or(cmp.Compare(gx, gy), cmp.Compare(nx, ny))
	})
}

// A position saved beside the spools (positions.json) counts what they hold
// as kept, so it may be trusted only while each spool is as the last run
// left it. A spool made anew does not hold what the position counts, nor
// does one whose last file lost a record after a clean shutdown. A record a
// kill cut short was never counted as spooled, so after a kill a cut spool
// is as it was left.
func TestASpoolIsAsLeftUnlessItIsNewOrLostARecordAfterACleanShutdown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, dir string) // what happens between the runs; nil: no first run
		want  bool
	}{
		{"A spool directory made by this start is not as left.", nil, false},
		{"A spool as a clean shutdown left it is.", func(*testing.T, string) {}, true},
		{"A spool whose last file was cut after a clean shutdown is not.", func(t *testing.T, dir string) {
			cutLastRecord(t, dir)
		}, false},
		{"A spool whose last file a kill cut is.", func(t *testing.T, dir string) {
			cutLastRecord(t, dir)
			// What a process that never reached Close leaves.
			if err := os.WriteFile(filepath.Join(dir, "running"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opt := fastOptions()
			opt.Logger = slog.New(slog.DiscardHandler)
			if tc.after != nil {
				d := dispatch.NewDispatcher("as-left", brokerDown(), opt)
				if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
					t.Fatal(err)
				}
				d.Start()
				for rv := 1; rv <= 5; rv++ {
					d.Enqueue(dispatch.NewItem(change(informer.OpUpdated, "cm0", rv)))
				}
				// The broker is down: Close spools what memory holds.
				if n := d.Close(context.Background()); n != 0 {
					t.Fatalf("%d events neither delivered nor spooled", n)
				}
				tc.after(t, dir)
			}
			d := dispatch.NewDispatcher("as-left", brokerDown(), opt)
			if err := d.UseSpool(spool.Options{Dir: dir, MaxBytes: 1 << 30, Fsync: config.FsyncInterval}); err != nil {
				t.Fatal(err)
			}
			defer d.Close(context.Background())
			if got := d.SpoolAsLeft(); got != tc.want {
				t.Fatalf("SpoolAsLeft() = %v, want %v", got, tc.want)
			}
		})
	}
}

// cutLastRecord cuts the last spool file of dir short, in its last record.
func cutLastRecord(t *testing.T, dir string) {
	t.Helper()
	f := lastSpoolFile(t, dir)
	st, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, st.Size()-10); err != nil {
		t.Fatal(err)
	}
}
