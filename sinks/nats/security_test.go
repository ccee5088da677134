package nats_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func writeSecret(t *testing.T, name, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// authCase is one way of securing the connection: how the server is set
// up, the sink's settings with the right and with a wrong secret, and the
// test subscriber's own options.
type authCase struct {
	name string
	// server changes the embedded server's options.
	server func(o *natsserver.Options)
	// right and wrong set up the sink's TLS and auth.
	right, wrong func(t *testing.T, c *kwnats.Config)
	// client are the test subscriber's options.
	client func(t *testing.T) []natsgo.Option
	// secrets must appear in no error and no log line.
	secrets []string
	// reason and says are the connect failure's metric reason and a phrase
	// its error must hold.
	reason, says string
}

func authCases(t *testing.T) []authCase {
	ca, other := testkit.NewCA(t, "kubewire test CA"), testkit.NewCA(t, "some other CA")
	serverTLS := ca.ServerTLS(t, "nats-server")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)

	const (
		password      = "Nw-right-pass-5c1e9a77d0"
		wrongPassword = "Nw-wrong-pass-3f8b2d61aa"
		token         = "Nw-right-token-91d4c0e2b7"
		wrongToken    = "Nw-wrong-token-27ae5f9c13"
	)
	user, _ := nkeys.CreateUser()
	userSeed, _ := user.Seed()
	userPub, _ := user.PublicKey()
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()

	creds, wrongCreds, trusted := operatorSetup(t)

	return []authCase{
		{
			name: "TLS required by the server, verified against caFile",
			server: func(o *natsserver.Options) {
				o.TLS, o.TLSConfig, o.TLSTimeout = true, serverTLS, 2
			},
			right: func(t *testing.T, c *kwnats.Config) { c.TLS = &kwnats.TLS{CAFile: ca.CertFile} },
			wrong: func(t *testing.T, c *kwnats.Config) { c.TLS = &kwnats.TLS{CAFile: other.CertFile} },
			client: func(t *testing.T) []natsgo.Option {
				return []natsgo.Option{natsgo.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})}
			},
			reason: metrics.ConnectTLS, says: "certificate signed by unknown authority",
		},
		{
			name:   "user and password from a file",
			server: func(o *natsserver.Options) { o.Users = []*natsserver.User{{Username: "kubewire", Password: password}} },
			right: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{User: "kubewire", PasswordFile: writeSecret(t, "password", password+"\n"), AllowInsecure: true}
			},
			wrong: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{User: "kubewire", PasswordFile: writeSecret(t, "password", wrongPassword+"\n"), AllowInsecure: true}
			},
			client:  func(*testing.T) []natsgo.Option { return []natsgo.Option{natsgo.UserInfo("kubewire", password)} },
			secrets: []string{password, wrongPassword},
			reason:  metrics.ConnectAuth, says: `authorization violation`,
		},
		{
			name:   "token from the environment",
			server: func(o *natsserver.Options) { o.Authorization = token },
			right: func(t *testing.T, c *kwnats.Config) {
				t.Setenv("KUBEWIRE_TEST_NATS_TOKEN", token)
				c.Auth = &kwnats.Auth{TokenEnv: "KUBEWIRE_TEST_NATS_TOKEN", AllowInsecure: true}
			},
			wrong: func(t *testing.T, c *kwnats.Config) {
				t.Setenv("KUBEWIRE_TEST_NATS_TOKEN", wrongToken)
				c.Auth = &kwnats.Auth{TokenEnv: "KUBEWIRE_TEST_NATS_TOKEN", AllowInsecure: true}
			},
			client:  func(*testing.T) []natsgo.Option { return []natsgo.Option{natsgo.Token(token)} },
			secrets: []string{token, wrongToken},
			reason:  metrics.ConnectAuth, says: "authorization violation",
		},
		{
			name:   "nkey seed from a file",
			server: func(o *natsserver.Options) { o.Nkeys = []*natsserver.NkeyUser{{Nkey: userPub}} },
			right: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{NkeySeedFile: writeSecret(t, "user.nk", string(userSeed)+"\n")}
			},
			wrong: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{NkeySeedFile: writeSecret(t, "user.nk", string(strangerSeed)+"\n")}
			},
			client: func(t *testing.T) []natsgo.Option {
				o, err := natsgo.NkeyOptionFromSeed(writeSecret(t, "client.nk", string(userSeed)))
				if err != nil {
					t.Fatal(err)
				}
				return []natsgo.Option{o}
			},
			secrets: []string{string(userSeed), string(strangerSeed)},
			reason:  metrics.ConnectAuth, says: "authorization violation",
		},
		{
			name:   "creds file of a user of an account the operator signed",
			server: trusted,
			right: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{CredsFile: writeSecret(t, "user.creds", creds.file)}
			},
			wrong: func(t *testing.T, c *kwnats.Config) {
				c.Auth = &kwnats.Auth{CredsFile: writeSecret(t, "user.creds", wrongCreds.file)}
			},
			client: func(t *testing.T) []natsgo.Option {
				return []natsgo.Option{natsgo.UserCredentials(writeSecret(t, "client.creds", creds.file))}
			},
			secrets: []string{creds.seed, wrongCreds.seed},
			reason:  metrics.ConnectAuth, says: "authorization violation",
		},
	}
}

type credsFile struct{ file, seed string }

// operatorSetup builds decentralized auth in memory: an operator, an
// account it signs, and a user the account signs, whose JWT and seed make
// the creds file. The wrong creds belong to a user of an account the
// operator never signed. trusted configures a server to trust the operator
// and to know the account.
func operatorSetup(t *testing.T) (right, wrong credsFile, trusted func(*natsserver.Options)) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opPub, _ := operator.PublicKey()
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(operator)
	must(err)
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	must(err)

	userOf := func(signer nkeys.KeyPair) credsFile {
		u, err := nkeys.CreateUser()
		must(err)
		pub, _ := u.PublicKey()
		seed, _ := u.Seed()
		uj, err := jwt.NewUserClaims(pub).Encode(signer)
		must(err)
		f, err := jwt.FormatUserConfig(uj, seed)
		must(err)
		return credsFile{file: string(f), seed: string(seed)}
	}
	account, err := nkeys.CreateAccount()
	must(err)
	accPub, _ := account.PublicKey()
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(operator)
	must(err)
	stranger, err := nkeys.CreateAccount()
	must(err)

	resolver := &natsserver.MemAccResolver{}
	must(resolver.Store(accPub, accJWT))
	return userOf(account), userOf(stranger), func(o *natsserver.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
		o.AccountResolver = resolver
	}
}

// Each way of securing the connection lets the sink publish, and the same
// sink with a wrong secret fails to connect with an error that names the
// problem and the server, counts the failure, leaves the sink unhealthy,
// and shows the secret nowhere.
func TestTheSinkConnectsWithEachSecuredSetupAndAWrongSecretFailsWithoutShowingIt(t *testing.T) {
	for _, c := range authCases(t) {
		t.Run(c.name, func(t *testing.T) {
			opts := natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
			c.server(&opts)
			b := newBroker(t, &embedded{opts: opts})

			t.Run("publishes with the right secret", func(t *testing.T) {
				var logs testkit.Buffer
				cfg := b.sinkConfig(kwnats.ModeCore)
				c.right(t, cfg)
				s := securedSink(t, "nats-right", cfg, &logs)
				nc, err := natsgo.Connect(b.URL(), c.client(t)...)
				if err != nil {
					t.Fatalf("test subscriber: %v", err)
				}
				defer nc.Close()
				sub, err := nc.SubscribeSync("kubewire.>")
				if err != nil || nc.Flush() != nil {
					t.Fatalf("subscribe: %v", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := s.Connect(ctx); err != nil {
					t.Fatalf("Connect: %v", err)
				}
				defer s.Close(context.Background())
				sent := sinktestEvent(t)
				if err := s.Write(ctx, []*encoding.Event{sent}); err != nil {
					t.Fatalf("Write: %v", err)
				}
				m, err := sub.NextMsg(10 * time.Second)
				if err != nil {
					t.Fatalf("the subscriber got nothing: %v", err)
				}
				got, err := decode(m.Header, m.Data)
				if err != nil || got.ID() != sent.ID() {
					t.Fatalf("received %v (%v), want event %s", got, err, sent.ID())
				}
				checkNoSecret(t, c.secrets, logs.String())
			})

			t.Run("fails clearly with a wrong secret", func(t *testing.T) {
				var logs testkit.Buffer
				cfg := b.sinkConfig(kwnats.ModeCore)
				c.wrong(t, cfg)
				const name = "nats-wrong"
				s := securedSink(t, name, cfg, &logs)
				failures := metrics.SinkConnectFailures.WithLabelValues(name, c.reason)
				before := testutil.ToFloat64(failures)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := s.Connect(ctx)
				if err == nil {
					s.Close(context.Background())
					t.Fatal("Connect succeeded with a wrong secret")
				}
				t.Logf("Connect: %v", err)
				msg := err.Error()
				for _, want := range []string{c.says, b.URL()} {
					if !strings.Contains(strings.ToLower(msg), strings.ToLower(want)) {
						t.Errorf("the Connect error does not say %q: %s", want, msg)
					}
				}
				checkNoSecret(t, c.secrets, msg)
				if d := testutil.ToFloat64(failures) - before; d != 1 {
					t.Errorf("kubewire_sink_connect_failures_total{reason=%q} grew by %v, want 1", c.reason, d)
				}

				// As kubewire runs it: the dispatcher retries, logs, and
				// reports the sink unhealthy.
				d := dispatch.NewDispatcher(name, s, dispatch.Options{
					Logger:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
					RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
				})
				d.Start()
				var none error
				testkit.Within(t, 20*time.Second, "two logged connect failures", func() bool {
					return strings.Count(logs.String(), "sink connect failed") >= 2
				}, func() string { return fmt.Sprintf("last error: %v", none) })
				if d.Healthy() {
					t.Error("the dispatcher reports the sink healthy")
				}
				if v := testutil.ToFloat64(metrics.SinkHealthy.WithLabelValues(name)); v != 0 {
					t.Errorf("kubewire_sink_healthy is %v, want 0", v)
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer ccancel()
				d.Close(cctx)
				checkNoSecret(t, c.secrets, logs.String())
			})
		})
	}
}

func securedSink(t *testing.T, name string, cfg *kwnats.Config, logs *testkit.Buffer) sinks.Sink {
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
		// Debug, so that nothing logged at any level escapes the check.
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func sinktestEvent(t *testing.T) *encoding.Event {
	t.Helper()
	ev, err := encoding.New(sinktest.Change(informer.OpAdded, "team-a", "secured", 1))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func checkNoSecret(t *testing.T, secrets []string, text string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("a secret appears in:\n%s", text)
		}
	}
}
