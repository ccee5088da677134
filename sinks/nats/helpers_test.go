package nats_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// server is a real nats-server that a test can stop and start again on the
// same port and store: embedded in the test process, or (in make e2e) the
// Debian nats-server binary as a separate process.
type natsServer interface {
	start(t testing.TB)
	stop()
	url() string
}

// broker wraps a server with the helpers the tests share.
type broker struct {
	mu  sync.Mutex
	srv natsServer
}

func newBroker(t testing.TB, srv natsServer) *broker {
	t.Helper()
	b := &broker{srv: srv}
	srv.start(t)
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.srv.stop()
	})
	return b
}

// startBroker runs nats-server in the test process with JetStream on and its
// store in a temporary directory that survives restarts.
func startBroker(t testing.TB) *broker {
	t.Helper()
	return newBroker(t, &embedded{opts: natsserver.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}})
}

type embedded struct {
	opts natsserver.Options
	srv  *natsserver.Server
}

func (e *embedded) start(t testing.TB) {
	t.Helper()
	opts := e.opts
	srv, err := natsserver.NewServer(&opts)
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not become ready")
	}
	e.srv = srv
	// Later starts reuse the port, so connected clients find it again.
	e.opts.Port = srv.Addr().(*net.TCPAddr).Port
}

func (e *embedded) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func (e *embedded) url() string { return e.srv.ClientURL() }

// Restart stops the server and starts a new one on the same port and store.
func (b *broker) Restart(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv.stop()
	b.srv.start(t)
}

// Stop shuts the server down; Start brings it back on the same port and
// store.
func (b *broker) Stop(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv.stop()
}

func (b *broker) Start(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv.start(t)
}

func (b *broker) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.srv.url()
}

// connect is the test's own client, separate from the sink's.
func (b *broker) connect(t *testing.T) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(b.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("test client: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// sinkConfig is a valid nats block for a sink of broker b.
func (b *broker) sinkConfig(mode string) *kwnats.Config {
	zero := -1
	return &kwnats.Config{
		Mode:           mode,
		Servers:        []string{b.URL()},
		MaxReconnects:  &zero,
		ReconnectWait:  config.NewDuration(20 * time.Millisecond),
		PublishTimeout: config.NewDuration(3 * time.Second),
	}
}

// newSink validates cfg as a whole configuration would and builds the sink.
func newSink(t testing.TB, name string, cfg *kwnats.Config) sinks.Sink {
	t.Helper()
	c := &config.Config{
		APIVersion: config.APIVersion, Kind: config.Kind, Cluster: "conformance",
		Resources: []config.Resource{{Version: "v1", Resource: "configmaps", Sinks: []string{name}}},
		Sinks:     []config.Sink{{Name: name, Type: kwnats.Type, Block: cfg}},
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("test config is invalid: %v", err)
	}
	s, err := kwnats.New(name, cfg, sinks.Deps{
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// decode reads a NATS message as a CloudEvents consumer that follows the
// binding would, with sdk-go doing the CloudEvents work and the standard
// library doing the percent-decoding, so that none of the sink's own
// encoding code takes part:
//   - Content-Type (any case) starting with application/cloudevents means
//     structured mode, read with sdk-go's JSON event format;
//   - otherwise binary mode: every ce- header is unquoted (RFC 7230),
//     percent-decoded (url.PathUnescape), checked to be UTF-8, and handed to
//     sdk-go's binding machinery, which maps names to attributes and
//     extensions and parses types (time).
func decode(h natsgo.Header, data []byte) (*event.Event, error) {
	for k, v := range h {
		if strings.EqualFold(k, "content-type") && len(v) > 0 &&
			strings.HasPrefix(strings.ToLower(v[0]), "application/cloudevents") {
			var ev event.Event
			if err := format.JSON.Unmarshal(data, &ev); err != nil {
				return nil, fmt.Errorf("structured: %w", err)
			}
			return &ev, nil
		}
	}
	return binding.ToEvent(context.Background(), &binaryMsg{h: h, data: data})
}

var ceSpecs = spec.WithPrefix("ce-")

type binaryMsg struct {
	h    natsgo.Header
	data []byte
}

func (m *binaryMsg) ReadEncoding() binding.Encoding { return binding.EncodingBinary }
func (m *binaryMsg) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}
func (m *binaryMsg) Finish(error) error { return nil }

// get returns the decoded value of header ce-name, matched in any case.
func (m *binaryMsg) get(name string) (string, bool) {
	for k, v := range m.h {
		if strings.EqualFold(k, "ce-"+name) && len(v) > 0 {
			s, err := unescapeHeader(v[0])
			return s, err == nil
		}
	}
	return "", false
}

func (m *binaryMsg) version() spec.Version {
	sv, _ := m.get("specversion")
	return ceSpecs.Version(sv)
}

func (m *binaryMsg) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	attr := v.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if s, ok := m.get(attr.Name()); ok {
		return attr, s
	}
	return attr, nil
}

func (m *binaryMsg) GetExtension(name string) interface{} {
	if s, ok := m.get(name); ok {
		return s
	}
	return nil
}

func (m *binaryMsg) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	var sv string
	for k, v := range m.h {
		if strings.EqualFold(k, "ce-specversion") {
			sv = v[0]
		}
	}
	version := ceSpecs.Version(sv)
	if version == nil {
		return fmt.Errorf("binary: no or unknown ce-specversion %q", sv)
	}
	for k, v := range m.h {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, "ce-") {
			continue
		}
		val, err := unescapeHeader(v[0])
		if err != nil {
			return fmt.Errorf("binary: header %s: %w", k, err)
		}
		if attr := version.Attribute(lk); attr != nil {
			err = w.SetAttribute(attr, val)
		} else {
			err = w.SetExtension(strings.TrimPrefix(lk, "ce-"), val)
		}
		if err != nil {
			return fmt.Errorf("binary: header %s: %w", k, err)
		}
	}
	return w.SetData(bytes.NewReader(m.data))
}

// unescapeHeader is the spec's receiving rule built from the standard
// library: strip double quotes, percent-decode once, insist on UTF-8.
func unescapeHeader(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(v[1 : len(v)-1])
	}
	s, err := url.PathUnescape(v)
	if err != nil {
		return "", err
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("percent-decoded value is not UTF-8")
	}
	return s, nil
}
