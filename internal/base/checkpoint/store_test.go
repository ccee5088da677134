package checkpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestThePositionFileIsReplacedWholeAndAMissingOneHoldsNothing(t *testing.T) {
	dir := t.TempDir()
	f := NewFile(dir)
	if got, err := f.Load(); err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v", got, err)
	}
	e := map[string]Entry{"configmaps": {Hash: "h", Streams: map[string]string{"": "7"}}}
	if err := f.Save(e); err != nil {
		t.Fatal(err)
	}
	if got, err := NewFile(dir).Load(); err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("read back %v, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("the temporary file was left behind: %v", err)
	}
}

// The API server caps all annotations of an object at 256 KiB; the
// checkpoints of a discovered cluster must fit one Lease with room left.
func TestTheCheckpointsOfAThousandDiscoveredResourcesFitTheLeaseAnnotationCap(t *testing.T) {
	const capBytes = 256 << 10
	entries := map[string]Entry{}
	for i := range 1000 {
		// A long CRD name: a 30-character plural in a 35-character group.
		name := fmt.Sprintf("resourcepluralnamesoflength%03d.group-%04d.subdomain.example.com", i, i)
		entries[name] = Entry{Hash: "0123456789abcdef", UID: "8f2c1e5a-0b7d-4c3e-9a1f-6d2b8e4c7a90", Streams: map[string]string{"": "18446744073"}}
	}
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1000 resources: %d bytes, %d per resource", len(b), len(b)/1000)
	if len(b) > capBytes*3/4 {
		t.Errorf("1000 resources take %d bytes of the %d the Lease may hold; docs/configuration.md states the bound", len(b), capBytes)
	}
}
