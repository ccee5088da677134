package docreader

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const vectorsDir = "../../../testdata/consumer-vectors"

// badRecords is how many records each vector of bad-records/ holds that
// break the contract, counted by reading the vector (README: "no
// resourceversion, one that is not a decimal unsigned integer, a gap whose
// from or to is not one, a completed marker of a snapshot never started").
var badRecords = map[string]int{
	// an updated and a deleted without resourceversion, a gap from "abc"
	// to "-", a synced at "xyz", and s9/completed never started.
	"bad-records/01-versions-that-cannot-be-read": 5,
}

func TestEveryConsumerVectorEndsInTheStateItExpectsWhenReadByTheDocumentsRule(t *testing.T) {
	var names []string
	err := filepath.WalkDir(vectorsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".jsonl") {
			rel, err := filepath.Rel(vectorsDir, path)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(strings.TrimSuffix(rel, ".jsonl")))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no vectors under %s", vectorsDir)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := os.Open(filepath.Join(vectorsDir, filepath.FromSlash(name)+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			steps, err := ParseVector(in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(vectorsDir, filepath.FromSlash(name)+".json"))
			if err != nil {
				t.Fatal(err)
			}
			want := []Object{}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("expected state: %v", err)
			}

			r := Replay(steps)

			if got := r.State(); !reflect.DeepEqual(got, want) {
				t.Errorf("state\n got  %+v\n want %+v", got, want)
			}
			problems := r.Problems()
			for _, p := range problems {
				t.Logf("reported: %s", p)
			}
			switch n, known := badRecords[name]; {
			case known && len(problems) != n:
				t.Errorf("reported %d records, want %d", len(problems), n)
			case !known && strings.HasPrefix(name, "bad-records/") && len(problems) == 0:
				t.Errorf("reported no record in a vector of bad records")
			case !known && !strings.HasPrefix(name, "bad-records/") && len(problems) != 0:
				t.Errorf("reported %d records in a vector without bad records", len(problems))
			}
		})
	}
}
