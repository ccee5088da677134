package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/benchdata"
	"github.com/kubewire/kubewire/internal/testing/natstest"
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

// BenchmarkPublishMsg is nats.go's publish of the message a JetStream sink
// builds, with its headers (the ce- ones and Nats-Msg-Id) and with none:
// the difference is what turning the header map into the wire format costs
// nats.go per message (Msg.headerBytes), work kubewire cannot spare it,
// since nats.go takes headers only as a map. A core publish to a real
// server that no one subscribes to, so nothing else differs.
func BenchmarkPublishMsg(b *testing.B) {
	nc, err := natsgo.Connect(natstest.Embedded(b).ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	for _, k := range benchdata.Kinds {
		ev := sinktest.BenchEvent(b, k)
		m := binaryMessage("bench."+k.Name, ev)
		m.Header[jetstream.MsgIDHeader] = msgID(m.Header, ev.ID())
		for _, c := range []struct {
			name   string
			header natsgo.Header
		}{{"headers", m.Header}, {"no-headers", nil}} {
			b.Run(k.Name+"/"+c.name, func(b *testing.B) {
				msg := &natsgo.Msg{Subject: m.Subject, Header: c.header, Data: m.Data}
				b.SetBytes(int64(len(m.Data)))
				b.ReportAllocs()
				for b.Loop() {
					if err := nc.PublishMsg(msg); err != nil {
						b.Fatal(err)
					}
				}
				if err := nc.Flush(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
