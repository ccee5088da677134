package docreader

import "testing"

func TestAVersionIsADecimalUnsignedIntegerOfAtMost64Bits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"4711", 4711, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"", 0, false},
		{"+1", 0, false},
		{"-1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1.0", 0, false},
		{"1e3", 0, false},
		{"1_000", 0, false},
		{"0x10", 0, false},
		{"abc", 0, false},
	} {
		got, ok := ParseVersion(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestVersionsAreComparedAsNumbersNotAsStrings(t *testing.T) {
	r := New()
	for i, line := range []string{
		`{"specversion":"1.0","id":"u/9/added","source":"/s","type":"io.kubewire.object.added","partitionkey":"configmaps/ns/a","uid":"u","resourceversion":"9","namespace":"ns"}`,
		`{"specversion":"1.0","id":"u/10/updated","source":"/s","type":"io.kubewire.object.updated","partitionkey":"configmaps/ns/a","uid":"u","resourceversion":"10","namespace":"ns"}`,
		`{"specversion":"1.0","id":"u/9/added","source":"/s","type":"io.kubewire.object.added","partitionkey":"configmaps/ns/a","uid":"u","resourceversion":"9","namespace":"ns"}`,
	} {
		r.Read(Record{Partition: "p0", Offset: uint64(i), Event: []byte(line)})
	}
	if got := r.State(); len(got) != 1 || got[0].ResourceVersion != "10" {
		t.Errorf("state = %+v, want configmaps/ns/a at 10", got)
	}
}
