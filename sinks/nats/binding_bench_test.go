package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/benchdata"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// This file is in the package itself because the message binding is
// unexported.

// BenchmarkMessage is the NATS binding stage as the sink runs it per event:
// the subject from the default template, then the binary (ce- headers,
// percent-encoded) or structured message.
func BenchmarkMessage(b *testing.B) {
	tmpl, err := CompileTemplate(DefaultSubject)
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		bind func(string, *encoding.Event) (*natsgo.Msg, error)
	}{{"binary", func(subject string, ev *encoding.Event) (*natsgo.Msg, error) { return binaryMessage(subject, ev), nil }}, {"structured", structuredMessage}} {
		for _, k := range benchdata.Kinds {
			b.Run(mode.name+"/"+k.Name, func(b *testing.B) {
				ev := sinktest.BenchEvent(b, k)
				b.SetBytes(int64(len(ev.Data())))
				b.ReportAllocs()
				for b.Loop() {
					subject, err := tmpl.Subject(ev)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := mode.bind(subject, ev); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
