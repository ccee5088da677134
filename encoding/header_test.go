package encoding_test

import (
	"bufio"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/encoding"
)

// A sink that writes its own header lines must send what SetTextHeaders
// puts in a header map: every attribute, percent-encoded the same way.
func TestAppendTextHeadersWritesTheLinesOfSetTextHeaders(t *testing.T) {
	ce := minimal()
	ce.SetSubject("ns/a b\"c%d\u00e9\r\nX-Injected: 1")
	ce.SetTime(time.Date(2026, 11, 27, 3, 4, 5, 600, time.FixedZone("x", 3600)))
	ce.SetDataSchema("https://example.com/s")
	ev, err := encoding.FromCloudEvent(ce)
	if err != nil {
		t.Fatal(err)
	}
	ev.SetExtension("kind", "ConfigMap")
	ev.SetExtension("changedby", "système:admin")

	want := map[string][]string{}
	encoding.SetTextHeaders(want, ev)

	lines := encoding.AppendTextHeaders([]byte("prefix\r\n"), ev)
	r := textproto.NewReader(bufio.NewReader(strings.NewReader(string(lines) + "\r\n")))
	if first, _ := r.ReadLine(); first != "prefix" {
		t.Fatalf("the lines did not follow what b held: %q", first)
	}
	got, err := r.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("%v in %q", err, lines)
	}
	canonical := map[string][]string{}
	for k, v := range want {
		canonical[textproto.CanonicalMIMEHeaderKey(k)] = v
	}
	if !reflect.DeepEqual(map[string][]string(got), canonical) {
		t.Errorf("AppendTextHeaders:\n%q\nwant the headers %q", lines, canonical)
	}
	if _, ok := got["X-Injected"]; ok {
		t.Error("a line break in a value started a header of its own")
	}
}
