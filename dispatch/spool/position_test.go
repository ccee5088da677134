package spool

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubewire/kubewire/internal/base/config"
)

// go-diskqueue writes a segment's read position to disk only when it syncs
// (once a second with fsync: interval). A process killed just after it read
// records back must not read them again at its next start: they were
// delivered, and newer events of their keys may have followed them. The
// directory is copied as a kill leaves it, while the spool is open.
func TestASpoolKilledRightAfterReadingRecordsBackDoesNotReadThemAgain(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxBytes int64
	}{
		{"Within one data file.", 1 << 30},
		{"Across data files.", MinBytes}, // 64 KiB files: 100 records of 4 KiB span several
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			live, killed := dir+"/live", dir+"/killed"
			s, err := Open(Options{Dir: live, MaxBytes: c.maxBytes, Fsync: config.FsyncInterval}, quiet(), new(atomic.Int64))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 100 {
				if err := s.Put(record(i, 4<<10)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for range 50 {
				if _, err := s.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.CopyFS(killed, os.DirFS(live)); err != nil {
				t.Fatal(err)
			}
			again, err := Open(Options{Dir: killed, MaxBytes: c.maxBytes, Fsync: config.FsyncInterval}, quiet(), new(atomic.Int64))
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if d := again.Depth(); d != 50 {
				t.Errorf("the spool opened after the kill holds %d records, want the 50 not yet read", d)
			}
			for want := 50; want < 100; want++ {
				rec, err := again.Next(ctx)
				if err != nil {
					t.Fatalf("record %d: %v", want, err)
				}
				if got := recordNumber(rec); got != want {
					t.Fatalf("after the kill the spool reads record %d where record %d is next: %s", got, want,
						fmt.Sprint("records read before the kill come out again"))
				}
			}
		})
	}
}

func recordNumber(rec []byte) int {
	return int(uint32(rec[0])<<24 | uint32(rec[1])<<16 | uint32(rec[2])<<8 | uint32(rec[3]))
}
