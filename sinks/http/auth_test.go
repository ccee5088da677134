package httpsink_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubewire/kubewire/dispatch"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	httpsink "github.com/kubewire/kubewire/sinks/http"
)

// writeSecret replaces the file at path as the kubelet updates a Secret
// volume: a whole new file renamed into place.
func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func lastPost(rcv *receiver, path string) request {
	posts := rcv.Posts(path)
	if len(posts) == 0 {
		return request{}
	}
	return posts[len(posts)-1]
}

func TestTheAuthHeaderIsReadFromItsFileAndFollowsItsChanges(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	token := filepath.Join(t.TempDir(), "token")
	writeSecret(t, token, "first-token\n")
	path := freshPath()
	s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, Auth: &httpsink.Auth{Scheme: "Bearer", ValueFile: token}})
	ctx := connect(t, s)
	ev := []*encoding.Event{mustEvent(t, change("a", 1))}

	if err := s.Write(ctx, ev); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := lastPost(rcv, path).Header.Get("Authorization"); got != "Bearer first-token" {
		t.Fatalf("Authorization = %q, want the scheme and the file's content without its line ending", got)
	}
	for _, q := range rcv.Requests() {
		if q.Method == "OPTIONS" && q.Header.Get("Authorization") != "Bearer first-token" {
			t.Errorf("the connect probe carried Authorization %q", q.Header.Get("Authorization"))
		}
	}

	t.Run("A rotated file is used within about a second.", func(t *testing.T) {
		writeSecret(t, token, "second-token\n")
		testkit.Within(t, 10*time.Second, "a request with the rotated token", func() bool {
			if err := s.Write(ctx, ev); err != nil {
				t.Fatalf("Write: %v", err)
			}
			return lastPost(rcv, path).Header.Get("Authorization") == "Bearer second-token"
		})
	})

	t.Run("A refusal of the credentials makes the next request read the file at once.", func(t *testing.T) {
		writeSecret(t, token, "third-token")
		rcv.Fail(401)
		if err := s.Write(ctx, ev); err == nil {
			t.Fatal("Write succeeded through a 401")
		}
		if err := s.Write(ctx, ev); err != nil {
			t.Fatalf("the retry: %v", err)
		}
		if got := lastPost(rcv, path).Header.Get("Authorization"); got != "Bearer third-token" {
			t.Fatalf("the retry after a 401 sent Authorization %q, want the rotated third-token", got)
		}
	})
}

func TestAnyHeaderNameCanCarryTheSecretAndStaticHeadersGoAlong(t *testing.T) {
	rcv := startReceiver(t, receiverOptions{})
	key := filepath.Join(t.TempDir(), "key")
	writeSecret(t, key, "k-123")
	path := freshPath()
	s := newSink(t, &httpsink.Config{URL: rcv.URL() + path, Auth: &httpsink.Auth{Header: "x-api-key", ValueFile: key},
		Headers: map[string]string{"X-Team": "shop", "user-agent": "audit-pipeline/1"}})
	ctx := connect(t, s)
	if err := s.Write(ctx, []*encoding.Event{mustEvent(t, change("a", 1))}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	h := lastPost(rcv, path).Header
	for name, want := range map[string]string{"X-Api-Key": "k-123", "X-Team": "shop", "User-Agent": "audit-pipeline/1", "Authorization": ""} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestTheSecretNeverAppearsInLogsOrErrors(t *testing.T) {
	const secret = "s3cret-token-value"
	rcv := startReceiver(t, receiverOptions{})
	token := filepath.Join(t.TempDir(), "token")
	writeSecret(t, token, secret)
	var logs testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	path := freshPath()
	s, err := httpsink.New("leak-check", &httpsink.Config{URL: rcv.URL() + path, Auth: &httpsink.Auth{Scheme: "Bearer", ValueFile: token}},
		sinks.Deps{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// Every refusal's body echoes the Authorization header back; the
	// dispatcher logs each failed write with its error.
	rcv.Fail(500, 401, 503, 429, 400)
	d := dispatch.NewDispatcher("leak-check", s, dispatch.Options{Shards: 1, RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, Logger: log})
	d.Start()
	d.Enqueue(dispatch.NewItem(change("a", 1)))
	d.Enqueue(dispatch.NewItem(change("a", 2)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.Close(ctx)

	out := logs.String()
	if !strings.Contains(out, "refused; you sent Authorization: Bearer [redacted]") {
		t.Errorf("the log does not show the receiver's refusal with the secret redacted:\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Fatalf("the secret is in the log:\n%s", out)
	}

	// A file that cannot be read is named, its content never.
	writeSecret(t, token, secret+"\nX-Injected: 1")
	s2, err := httpsink.New("leak-check-2", &httpsink.Config{URL: rcv.URL(), Auth: &httpsink.Auth{ValueFile: token}}, sinks.Deps{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Connect(ctx)
	if err == nil || !strings.Contains(err.Error(), "auth.valueFile "+token) || strings.Contains(err.Error(), secret) {
		t.Fatalf("Connect with a value no header can carry = %v; want an error naming the file, not its content", err)
	}
	err = connectErr(t, &httpsink.Config{URL: rcv.URL(), Auth: &httpsink.Auth{ValueFile: token + ".missing"}})
	if err == nil || !strings.Contains(err.Error(), "auth.valueFile") {
		t.Fatalf("Connect with a missing auth file = %v; want an error naming auth.valueFile", err)
	}
}
