package nats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The vectors come from the binding's text (3.1.3.2), not from our encoder.
func TestHeaderValuesArePercentEncodedAsTheBindingRequires(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"A plain value is left alone.", "io.kubewire.object.updated", "io.kubewire.object.updated"},
		{"Slashes and colons are printable ASCII and stay.", "/clusters/demo/api/v1/configmaps", "/clusters/demo/api/v1/configmaps"},
		{"The binding's own example encodes space, euro sign and emoji byte by byte.", "Euro € 😀", "Euro%20%E2%82%AC%20%F0%9F%98%80"},
		{"A space is encoded so that no quoting is needed.", "a b", "a%20b"},
		{"A double quote is encoded.", `say "hi"`, "say%20%22hi%22"},
		{"A percent sign is encoded so decoding is unambiguous.", "50%", "50%25"},
		{"An already encoded-looking value is encoded again, not trusted.", "%20", "%2520"},
		{"Control characters are encoded.", "a\tb\nc\x7f", "a%09b%0Ac%7F"},
		{"Non-ASCII letters are encoded as their UTF-8 bytes in upper-case hex.", "ünï", "%C3%BCn%C3%AF"},
		{"Other printable ASCII stays as it is.", "a+b=c&d;e,f'g(h)i~!", "a+b=c&d;e,f'g(h)i~!"},
		{"The empty value stays empty.", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := encoding.EncodeHeaderValue(c.in)
			if got != c.want {
				t.Fatalf("EncodeHeaderValue(%q) = %q, want %q", c.in, got, c.want)
			}
			for i := 0; i < len(got); i++ {
				if b := got[i]; b < 0x21 || b > 0x7e || b == '"' {
					t.Fatalf("encoded value %q holds byte %#x, which a NATS header must not", got, b)
				}
			}
			// The standard library's percent-decoder, not ours, gets the
			// value back.
			back, err := unescapeHeader(got)
			if err != nil || back != c.in {
				t.Fatalf("decoding %q with the standard library gave %q, %v; want %q", got, back, err, c.in)
			}
		})
	}
}

func TestHeaderValuesAreDecodedAsTheBindingRequires(t *testing.T) {
	cases := []struct {
		name, in, want string
		bad            bool
	}{
		{name: "Upper-case hex decodes.", in: "Euro%20%E2%82%AC%20%F0%9F%98%80", want: "Euro € 😀"},
		{name: "Lower-case hex must be accepted.", in: "Euro%20%e2%82%ac", want: "Euro €"},
		{name: "Needlessly encoded characters must be accepted.", in: "%61%62c", want: "abc"},
		{name: "A double-quoted value from an older sender is unquoted first.", in: `"a \"b\" c"`, want: `a "b" c`},
		{name: "Quoting is removed before the one round of percent-decoding.", in: `"100%25"`, want: "100%"},
		{name: "Only one round of decoding is done.", in: "%2520", want: "%20"},
		{name: "The overlong encoding of a space must be rejected.", in: "%C0%A0", bad: true},
		{name: "Bytes that are not UTF-8 must be rejected.", in: "%FF", bad: true},
		{name: "A truncated escape is rejected.", in: "abc%2", bad: true},
		{name: "A non-hex escape is rejected.", in: "%zz", bad: true},
		{name: "An unterminated quoted string is rejected.", in: `"abc`, bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := encoding.DecodeHeaderValue(c.in)
			if c.bad {
				if !errors.Is(err, encoding.ErrBadHeaderValue) {
					t.Fatalf("DecodeHeaderValue(%q) = %q, %v; want ErrBadHeaderValue", c.in, got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("DecodeHeaderValue(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func FuzzHeaderValuesRoundTripAndStayPrintable(f *testing.F) {
	for _, s := range []string{"", "a b", `"`, "%", "€", "😀", "\x00", "%C0%A0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := encoding.EncodeHeaderValue(s)
		for i := 0; i < len(enc); i++ {
			if b := enc[i]; b < 0x21 || b > 0x7e || b == '"' {
				t.Fatalf("EncodeHeaderValue(%q) = %q holds byte %#x", s, enc, b)
			}
		}
		dec, err := encoding.DecodeHeaderValue(enc)
		switch {
		case !utf8.ValidString(s):
			// Attribute values are strings; bytes that are not UTF-8
			// must be rejected on the way back in.
			if err == nil {
				t.Fatalf("DecodeHeaderValue accepted %q, which decodes to bytes that are not UTF-8", enc)
			}
		case err != nil || dec != s:
			t.Fatalf("round trip of %q gave %q, %v", s, dec, err)
		}
	})
}

// A binary-mode message on the wire, read back by the test's own client:
// header names, no Content-Type, Nats-Msg-Id, and values that need encoding.
func TestABinaryMessageCarriesEveryAttributeInCEHeadersAndTheMessageID(t *testing.T) {
	b := startBroker(t)
	cfg := b.sinkConfig(kwnats.ModeJetStream)
	cfg.Subject = "bin.{namespace}.{name}"
	cfg.JetStream = &kwnats.JetStream{Stream: &kwnats.Stream{Name: "BIN"}}
	s := newSink(t, "bin", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	ev := event.New()
	ev.SetID("uid-1/42/updated")
	ev.SetType("io.kubewire.object.updated")
	ev.SetSource("/clusters/demo/api/v1/configmaps")
	ev.SetSubject("team a/cm 1")
	ev.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC))
	ev.SetExtension("partitionkey", "configmaps/team a/cm 1")
	ev.SetExtension("namespace", "team a")
	ev.SetExtension("name", "cm 1")
	ev.SetExtension("note", `50% "quoted" ünï`)
	if err := ev.SetData(event.ApplicationJSON, []byte(`{"a":"ü"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []*encoding.Event{sinktest.FromCloudEvent(t, &ev)}); err != nil {
		t.Fatalf("Write: %v", err)
	}

	js, err := jetstream.New(b.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "BIN")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "bin.team~20a.cm~201"; raw.Subject != want {
		t.Errorf("subject %q, want %q", raw.Subject, want)
	}
	want := map[string]string{
		"ce-specversion":     "1.0",
		"ce-id":              "uid-1/42/updated",
		"ce-type":            "io.kubewire.object.updated",
		"ce-source":          "/clusters/demo/api/v1/configmaps",
		"ce-subject":         "team%20a/cm%201",
		"ce-time":            "2026-01-02T03:04:05.6Z",
		"ce-datacontenttype": "application/json",
		"ce-partitionkey":    "configmaps/team%20a/cm%201",
		"ce-namespace":       "team%20a",
		"ce-name":            "cm%201",
		"ce-note":            "50%25%20%22quoted%22%20%C3%BCn%C3%AF",
		"Nats-Msg-Id":        "uid-1/42/updated",
	}
	for k, v := range want {
		if got := raw.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want exactly [%q]", k, got, v)
		}
	}
	for k := range raw.Header {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected header %s: %q (binary mode sets no Content-Type: it would mean structured)", k, raw.Header[k])
		}
	}
	if string(raw.Data) != `{"a":"ü"}` {
		t.Errorf("body %s, want the data unchanged", raw.Data)
	}
	got, err := decode(natsgo.Header(raw.Header), raw.Data)
	if err != nil {
		t.Fatalf("the message is not a valid binary CloudEvent: %v", err)
	}
	if got.Extensions()["note"] != `50% "quoted" ünï` || got.Subject() != "team a/cm 1" {
		t.Errorf("decoded note %q and subject %q; want the original values", got.Extensions()["note"], got.Subject())
	}
}

func TestAStructuredMessageIsTheJSONEventWithTheCloudEventsContentType(t *testing.T) {
	b := startBroker(t)
	nc := b.connect(t)
	sub, err := nc.SubscribeSync("st.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cfg := b.sinkConfig(kwnats.ModeCore)
	cfg.Subject = "st.{resource}.{name}"
	cfg.ContentMode = config.ContentModeStructured
	s := newSink(t, "st", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	ev := event.New()
	ev.SetID("x")
	ev.SetType("t")
	ev.SetSource("/clusters/demo/apis/apps/v1/deployments")
	ev.SetExtension("name", "web")
	ev.SetExtension("namespace", "prod")
	if err := ev.SetData(event.ApplicationJSON, []byte(`{"k":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []*encoding.Event{sinktest.FromCloudEvent(t, &ev)}); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "st.deployments.web" {
		t.Errorf("subject %q", m.Subject)
	}
	if ct := m.Header.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Errorf("Content-Type %q, want application/cloudevents+json", ct)
	}
	for k := range m.Header {
		if strings.HasPrefix(strings.ToLower(k), "ce-") {
			t.Errorf("structured mode set attribute header %s", k)
		}
	}
	got, err := decode(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != "x" || got.Extensions()["name"] != "web" || string(got.Data()) != `{"k":1}` {
		t.Errorf("decoded %v", got)
	}
}
