//go:build e2e

package kafka_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/kafkatest"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// The passwords are long and unusual so that finding one in a log or an
// error cannot be a coincidence.
const (
	kafkaUser     = "kubewire"
	kafkaPassword = "Kw-right-pass-7f3a9c21e6"
	wrongPassword = "Kw-wrong-pass-0b5d8e44f1"
)

func debugLogger(w *testkit.Buffer) *slog.Logger {
	// Debug, so that nothing the code logs at any level escapes the check.
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// secureSink builds a Kafka sink for addr that logs into logs, with topics
// under a fresh prefix created with one partition.
func secureSink(t *testing.T, name, addr string, logs *testkit.Buffer, edit func(*kafka.Config)) (sinks.Sink, *kafka.Config, string) {
	t.Helper()
	prefix := uniquePrefix(t)
	kc := &kafka.Config{
		Brokers:        []string{addr},
		Topic:          prefix + ".{group}.{resource}",
		CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second),
		DialTimeout:    config.NewDuration(2 * time.Second),
	}
	edit(kc)
	s, err := kafka.New(name, kc, sinks.Deps{Logger: debugLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	return s, kc, prefix
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func scramFromFile(caFile, password string) func(*kafka.Config) {
	return func(k *kafka.Config) {
		k.TLS = &kafka.TLS{CAFile: caFile}
		k.SASL = &kafka.SASL{Mechanism: kafka.SASLScramSHA512, Username: kafkaUser, PasswordFile: password}
	}
}

// One broker, with a TLS-only and a SASL_SSL listener besides PLAINTEXT,
// serves every case: starting Kafka is the slow part.
func TestE2ETLSAndSASLOnRealKafka(t *testing.T) {
	b := kafkatest.StartWith(t, kafkatest.Options{TLS: true, ClientAuth: true, SASL: true, Users: map[string]string{kafkaUser: kafkaPassword}})

	t.Run("SCRAM-SHA-512 over TLS with a verified CA and the password from a file passes the conformance cases", func(t *testing.T) {
		pw := writeFile(t, "password", kafkaPassword+"\n")
		var logs testkit.Buffer
		sinktest.Run(t, sinktest.Harness{
			New: func(t *testing.T) (sinks.Sink, sinktest.Reader) {
				s, _, prefix := secureSink(t, "kafka-scram", b.SASLSSLAddr, &logs, scramFromFile(b.CAFile, pw))
				return s, func(ctx context.Context, t *testing.T) []*event.Event {
					// Read back on the PLAINTEXT listener with a reader that
					// is not the sink's.
					var all []rawRecord
					for _, topic := range suiteTopics(prefix) {
						all = append(all, readTopic(ctx, t, b.Addr, topic)...)
					}
					return decodeRecords(t, all)
				}
			},
		})
		if strings.Contains(logs.String(), kafkaPassword) {
			t.Errorf("the password appears in the logs:\n%s", logs.String())
		}
	})

	t.Run("PLAIN over TLS with the password from the environment writes and reads back", func(t *testing.T) {
		t.Setenv("KUBEWIRE_TEST_KAFKA_PASSWORD", kafkaPassword)
		var logs testkit.Buffer
		s, sc, prefix := secureSink(t, "kafka-plain", b.SASLSSLAddr, &logs, func(k *kafka.Config) {
			k.TLS = &kafka.TLS{CAFile: b.CAFile}
			k.SASL = &kafka.SASL{Mechanism: kafka.SASLPlain, Username: kafkaUser, PasswordEnv: "KUBEWIRE_TEST_KAFKA_PASSWORD"}
		})
		writeAndReadBack(t, s, sc, widgetTopic(prefix))
		if strings.Contains(logs.String(), kafkaPassword) {
			t.Errorf("the password appears in the logs:\n%s", logs.String())
		}
	})

	t.Run("SCRAM-SHA-256 over TLS writes and reads back", func(t *testing.T) {
		pw := writeFile(t, "password", kafkaPassword)
		var logs testkit.Buffer
		s, sc, prefix := secureSink(t, "kafka-scram256", b.SASLSSLAddr, &logs, func(k *kafka.Config) {
			k.TLS = &kafka.TLS{CAFile: b.CAFile}
			k.SASL = &kafka.SASL{Mechanism: kafka.SASLScramSHA256, Username: kafkaUser, PasswordFile: pw}
		})
		writeAndReadBack(t, s, sc, widgetTopic(prefix))
		if strings.Contains(logs.String(), kafkaPassword) {
			t.Errorf("the password appears in the logs:\n%s", logs.String())
		}
	})

	t.Run("Mutual TLS with a client certificate verifies the broker against the CA and writes", func(t *testing.T) {
		cert, key, err := b.IssueClientCert(t.TempDir(), "kubewire")
		if err != nil {
			t.Fatal(err)
		}
		var logs testkit.Buffer
		s, sc, prefix := secureSink(t, "kafka-mtls", b.SSLAddr, &logs, func(k *kafka.Config) {
			k.TLS = &kafka.TLS{CAFile: b.CAFile, CertFile: cert, KeyFile: key}
		})
		writeAndReadBack(t, s, sc, widgetTopic(prefix))
	})

	t.Run("TLS without the client certificate the broker requires fails Connect with a TLS error", func(t *testing.T) {
		name := "kafka-no-client-cert"
		var logs testkit.Buffer
		s, _, _ := secureSink(t, name, b.SSLAddr, &logs, func(k *kafka.Config) {
			k.TLS = &kafka.TLS{CAFile: b.CAFile}
		})
		before := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectTLS))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := s.Connect(ctx)
		if err == nil {
			t.Fatal("Connect without a client certificate succeeded against a broker that requires one")
		}
		t.Logf("Connect: %v", err)
		for _, want := range []string{b.SSLAddr, "no client certificate is configured"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the Connect error does not say %q: %v", want, err)
			}
		}
		if d := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectTLS)) - before; d != 1 {
			t.Errorf("kubewire_sink_connect_failures_total{reason=tls} grew by %v, want 1", d)
		}
	})

	for _, mech := range []string{kafka.SASLScramSHA512, kafka.SASLPlain} {
		t.Run("A wrong "+mech+" password fails Connect clearly, marks the sink unhealthy and never shows the password", func(t *testing.T) {
			pw := writeFile(t, "password", wrongPassword+"\n")
			name := "kafka-wrong-" + strings.ToLower(mech)
			var logs testkit.Buffer
			s, _, _ := secureSink(t, name, b.SASLSSLAddr, &logs, func(k *kafka.Config) {
				k.TLS = &kafka.TLS{CAFile: b.CAFile}
				k.SASL = &kafka.SASL{Mechanism: mech, Username: kafkaUser, PasswordFile: pw}
			})
			before := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectAuth))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := s.Connect(ctx)
			if err == nil {
				t.Fatal("Connect with a wrong password succeeded")
			}
			msg := err.Error()
			for _, want := range []string{mech, kafkaUser, b.SASLSSLAddr} {
				if !strings.Contains(msg, want) {
					t.Errorf("the Connect error does not name %q: %s", want, msg)
				}
			}
			if !strings.Contains(strings.ToLower(msg), "authentication failed") {
				t.Errorf("the Connect error does not say that authentication failed: %s", msg)
			}
			if strings.Contains(msg, wrongPassword) || strings.Contains(msg, kafkaPassword) {
				t.Errorf("the Connect error shows a password: %s", msg)
			}
			if d := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectAuth)) - before; d != 1 {
				t.Errorf("kubewire_sink_connect_failures_total{reason=auth} grew by %v, want 1", d)
			}
			t.Logf("Connect: %v", err)

			// The way kubewire runs it: a dispatcher retries Connect, logs
			// each failure, and reports the sink unhealthy.
			d := dispatch.NewDispatcher(name, s, dispatch.Options{Logger: debugLogger(&logs), RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
			d.Start()
			d.Enqueue(dispatch.NewItem(sinktest.Change(informer.OpAdded, "team-a", "never", 1)))
			testkit.Within(t, 30*time.Second, "two logged connect failures", func() bool {
				return strings.Count(logs.String(), "sink connect failed") >= 2
			}, logs.String)
			if d.Healthy() {
				t.Error("the dispatcher reports a sink with a wrong password as healthy")
			}
			if v := testutil.ToFloat64(metrics.SinkHealthy.WithLabelValues(name)); v != 0 {
				t.Errorf("kubewire_sink_healthy is %v, want 0", v)
			}
			cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer ccancel()
			if n := d.Close(cctx); n != 1 {
				t.Errorf("Close reported %d undelivered events, want 1", n)
			}
			out := logs.String()
			if strings.Contains(out, wrongPassword) || strings.Contains(out, kafkaPassword) {
				t.Errorf("a password appears in the logs:\n%s", out)
			}
			if !strings.Contains(out, mech) {
				t.Errorf("the logs do not name the mechanism %s:\n%s", mech, out)
			}
		})
	}

	t.Run("A broker certificate from another CA fails Connect with a clear TLS error", func(t *testing.T) {
		other, err := kafkatest.NewCA(t.TempDir(), "some other CA")
		if err != nil {
			t.Fatal(err)
		}
		pw := writeFile(t, "password", kafkaPassword)
		name := "kafka-wrong-ca"
		var logs testkit.Buffer
		s, _, _ := secureSink(t, name, b.SASLSSLAddr, &logs, scramFromFile(other.CertFile, pw))
		before := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectTLS))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = s.Connect(ctx)
		if err == nil {
			t.Fatal("Connect trusted a broker certificate signed by another CA")
		}
		t.Logf("Connect: %v", err)
		msg := err.Error()
		for _, want := range []string{b.SASLSSLAddr, "certificate signed by unknown authority"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the Connect error does not say %q: %s", want, msg)
			}
		}
		if strings.Contains(msg, kafkaPassword) || strings.Contains(logs.String(), kafkaPassword) {
			t.Error("the password appears in the error or the logs")
		}
		if d := testutil.ToFloat64(metrics.SinkConnectFailures.WithLabelValues(name, metrics.ConnectTLS)) - before; d != 1 {
			t.Errorf("kubewire_sink_connect_failures_total{reason=tls} grew by %v, want 1", d)
		}
	})
}

// writeAndReadBack writes three changes through s and reads them back with
// kafka.ReadTopic over the same secured listener and credentials.
func writeAndReadBack(t *testing.T, s sinks.Sink, sc *kafka.Config, topic string) {
	t.Helper()
	connect(t, s)
	write(t, s,
		sinktest.Change(informer.OpAdded, "team-a", "one", 1),
		sinktest.Change(informer.OpAdded, "team-a", "two", 2),
		sinktest.Change(informer.OpUpdated, "team-a", "one", 3),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	err := kafka.ReadTopic(ctx, sc, topic, func(r kafka.Record) error {
		if r.Event != nil {
			n, _ := r.Event.Extensions()[encoding.ExtName].(string)
			names = append(names, n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ReadTopic: %v", err)
	}
	if got, want := strings.Join(names, ","), "one,two,one"; got != want {
		t.Errorf("the topic holds %s, want %s", got, want)
	}
}
