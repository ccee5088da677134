package checkpoint

import (
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
