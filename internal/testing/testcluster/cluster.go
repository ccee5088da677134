package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is always present and belongs to system:masters, which RBAC
// lets through unconditionally, so tests need no bindings to set up fixtures.
const AdminUser = "admin"

const (
	etcdReadyTimeout      = 30 * time.Second
	apiServerReadyTimeout = 90 * time.Second
	pollInterval          = 100 * time.Millisecond
	logTailLines          = 40
)

// User is an extra identity authenticated by a static bearer token. Users
// start with no RBAC permissions beyond what their groups confer, which
// makes them suitable for testing authorization failures.
type User struct {
	Name   string
	Groups []string
}

// Options configures Start.
type Options struct {
	// Progress receives human-oriented status lines, including the notice
	// that a first run is building the binaries. Nil discards them.
	Progress io.Writer
	// Users are created in addition to AdminUser.
	Users []User
	// APIServerArgs are appended to the apiserver's command line. Without
	// any the watch cache is on, as kube-apiserver defaults to, and a test
	// that needs a compacted history gone restarts the API server
	// (ForgetHistory); how
	// long each serves an old resourceVersion is measured in
	// window_test.go (docs/operations.md, "How long kubewire can be down").
	APIServerArgs []string
	// EtcdQuotaBackendBytes sets etcd's storage quota (its
	// --quota-backend-bytes) for fixtures near or above the default of
	// 2 GiB, such as 100k Pods written twice each. Zero keeps etcd's default.
	EtcdQuotaBackendBytes int64
	// Address is the IP kube-apiserver binds to and advertises, for a
	// cluster whose pods must reach it (internal/testing/nodecluster): pods cannot
	// reach the host's loopback, and the kubernetes Service's endpoint may
	// not be a loopback address. Nil keeps 127.0.0.1. The serving
	// certificate then also names the Service's ClusterIP, 10.0.0.1.
	Address net.IP
	// ServiceAccounts keeps the ServiceAccount admission plugin, which
	// mounts a token into every pod. It rejects pods whose ServiceAccount
	// does not exist, so it needs a kube-controller-manager creating the
	// default ones; without one (the default) the plugin is disabled.
	ServiceAccounts bool
}

// Cluster is a running etcd and kube-apiserver pair. Its methods are safe
// for concurrent use.
type Cluster struct {
	dir      string
	progress io.Writer
	bins     Binaries
	etcdURL  string
	peerPort int
	// etcdData is etcd's data directory; a restore moves it.
	etcdData string
	apiURL   string
	apiArgs  []string
	etcdArgs []string
	caPEM    []byte
	tokens   map[string]string // user name -> bearer token

	mu        sync.Mutex
	etcd      *process
	apiserver *process // nil while stopped
	stopped   bool
}

// Start builds the binaries if needed, then starts etcd and kube-apiserver on
// free loopback ports and returns once the apiserver reports ready. The
// caller must call Stop; children are also killed if the calling process
// dies first. ctx bounds only the startup, not the cluster's lifetime.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	bins, err := EnsureBinaries(ctx, progress)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kubewire-testcluster-")
	if err != nil {
		return nil, fmt.Errorf("creating cluster dir: %w", err)
	}
	c := &Cluster{dir: dir, progress: progress, bins: bins}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	if err := c.configure(ports, opts); err != nil {
		return nil, err
	}
	c.apiArgs = append(c.apiArgs, opts.APIServerArgs...)
	if opts.EtcdQuotaBackendBytes > 0 {
		c.etcdArgs = append(c.etcdArgs, "--quota-backend-bytes="+strconv.FormatInt(opts.EtcdQuotaBackendBytes, 10))
	}
	c.peerPort, c.etcdData = ports[1], filepath.Join(dir, "etcd")
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	err = c.startAPIServerLocked(ctx)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// configure writes credentials and certificates into c.dir and derives the
// apiserver command line, which stays fixed across restarts.
func (c *Cluster) configure(ports []int, opts Options) error {
	addr := net.IPv4(127, 0, 0, 1)
	ips := []net.IP{addr}
	if opts.Address != nil {
		addr = opts.Address
		ips = append(ips, addr, net.IPv4(10, 0, 0, 1))
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	c.apiURL = "https://" + net.JoinHostPort(addr.String(), strconv.Itoa(ports[2]))

	path := func(name string) string { return filepath.Join(c.dir, name) }
	var err error
	if c.caPEM, err = writeServingCert(path("apiserver.crt"), path("apiserver.key"), ips); err != nil {
		return err
	}
	if err := writeServiceAccountKeys(path("sa.key"), path("sa.pub")); err != nil {
		return err
	}
	if err := c.writeTokens(path("tokens.csv"), opts.Users); err != nil {
		return err
	}
	c.apiArgs = []string{
		"--etcd-servers=" + c.etcdURL,
		"--cert-dir=" + path("certs"),
		"--tls-cert-file=" + path("apiserver.crt"),
		"--tls-private-key-file=" + path("apiserver.key"),
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--bind-address=" + addr.String(),
		"--advertise-address=" + addr.String(),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + path("sa.pub"),
		"--service-account-signing-key-file=" + path("sa.key"),
		"--authorization-mode=RBAC",
		"--token-auth-file=" + path("tokens.csv"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
	}
	if !opts.ServiceAccounts {
		// No controller-manager runs to create the default service
		// accounts, so this plugin would reject every pod.
		c.apiArgs = append(c.apiArgs, "--disable-admission-plugins=ServiceAccount")
	}
	return nil
}

func (c *Cluster) writeTokens(path string, users []User) error {
	all := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, users...)
	c.tokens = make(map[string]string, len(all))
	var b strings.Builder
	w := csv.NewWriter(&b)
	for _, u := range all {
		if u.Name == "" {
			return errors.New("testcluster: user with empty name")
		}
		if _, dup := c.tokens[u.Name]; dup {
			return fmt.Errorf("testcluster: duplicate user %q", u.Name)
		}
		token := rand.Text()
		c.tokens[u.Name] = token
		rec := []string{token, u.Name, u.Name}
		if len(u.Groups) > 0 {
			for _, g := range u.Groups {
				if g == "" || strings.Contains(g, ",") {
					return fmt.Errorf("testcluster: user %q: invalid group %q", u.Name, g)
				}
			}
			rec = append(rec, strings.Join(u.Groups, ","))
		}
		w.Write(rec) // errors surface via w.Error
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("encoding tokens: %w", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing tokens: %w", err)
	}
	return nil
}

func (c *Cluster) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.peerPort) }

func (c *Cluster) startEtcd(ctx context.Context) error {
	peerURL := c.peerURL()
	fmt.Fprintf(c.progress, "starting etcd on %s\n", c.etcdURL)
	args := append([]string{
		"--name=testcluster",
		"--data-dir=" + c.etcdData,
		"--listen-client-urls=" + c.etcdURL,
		"--advertise-client-urls=" + c.etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testcluster=" + peerURL,
		// Durability is pointless for a throwaway cluster and fsync
		// dominates write latency on CI disks.
		"--unsafe-no-fsync",
	}, c.etcdArgs...)
	p, err := startProcess("etcd", c.bins.Etcd, filepath.Join(c.dir, "etcd.log"), args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()

	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	return waitReady(ctx, p, etcdReadyTimeout, func(ctx context.Context) error {
		body, err := get(ctx, client, c.etcdURL+"/health")
		if err == nil && !strings.Contains(body, `"health":"true"`) {
			err = fmt.Errorf("unhealthy: %s", body)
		}
		return err
	})
}

// StopAPIServer stops kube-apiserver while leaving etcd and the cluster's
// state intact, to simulate an apiserver outage.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopAPIServerLocked()
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same
// address and with the same credentials, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startAPIServerLocked(ctx)
}

// RestartAPIServer stops and starts kube-apiserver, forcing clients to
// reconnect and re-establish their watches.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopAPIServerLocked(); err != nil {
		return err
	}
	return c.startAPIServerLocked(ctx)
}

func (c *Cluster) stopAPIServerLocked() error {
	if c.apiserver == nil {
		return nil
	}
	err := c.apiserver.stop()
	c.apiserver = nil
	if errors.Is(err, errKilled) {
		// An apiserver holding watches open may outlast the grace period;
		// killed is stopped, which is all a restart needs.
		fmt.Fprintln(c.progress, err)
		return nil
	}
	return err
}

func (c *Cluster) startAPIServerLocked(ctx context.Context) error {
	switch {
	case c.stopped:
		return errors.New("testcluster: cluster is stopped")
	case c.apiserver != nil:
		return errors.New("testcluster: kube-apiserver is already running")
	}
	fmt.Fprintf(c.progress, "starting kube-apiserver on %s\n", c.apiURL)
	start := time.Now()
	p, err := startProcess("kube-apiserver", c.bins.APIServer, filepath.Join(c.dir, "kube-apiserver.log"), c.apiArgs...)
	if err != nil {
		return err
	}
	tr, err := rest.TransportFor(c.RESTConfig(AdminUser))
	if err != nil {
		p.stop()
		return fmt.Errorf("building admin transport: %w", err)
	}
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	err = waitReady(ctx, p, apiServerReadyTimeout, func(ctx context.Context) error {
		_, err := get(ctx, client, c.apiURL+"/readyz")
		return err
	})
	if err != nil {
		p.stop()
		return err
	}
	c.apiserver = p
	fmt.Fprintf(c.progress, "kube-apiserver ready after %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}

// Stop shuts down kube-apiserver and etcd and deletes all cluster state.
// It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	errs := []error{c.stopAPIServerLocked()}
	if c.etcd != nil {
		errs = append(errs, c.etcd.stop())
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing cluster dir: %w", err))
	}
	return errors.Join(errs...)
}

// PIDs returns the process IDs of the server processes currently running,
// so tests can verify that nothing outlives Stop.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pids []int
	for _, p := range []*process{c.etcd, c.apiserver} {
		if p != nil && !p.exited() {
			pids = append(pids, p.pid())
		}
	}
	return pids
}

// RESTConfig returns a client configuration authenticating as user, which
// must be AdminUser or one of Options.Users; anything else is a programming
// error and panics. Rate limits are raised well above client-go's defaults
// so that tests creating many objects are not throttled client-side.
func (c *Cluster) RESTConfig(user string) *rest.Config {
	token, ok := c.tokens[user]
	if !ok {
		panic(fmt.Sprintf("testcluster: unknown user %q", user))
	}
	return &rest.Config{
		Host:            c.apiURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.caPEM},
		QPS:             100,
		Burst:           200,
	}
}

// CAPEM returns the PEM certificate clients verify the apiserver with.
func (c *Cluster) CAPEM() []byte { return c.caPEM }

// ServiceAccountKeyFile is the private key the apiserver signs service
// account tokens with, for a kube-controller-manager's
// --service-account-private-key-file.
func (c *Cluster) ServiceAccountKeyFile() string { return filepath.Join(c.dir, "sa.key") }

// WriteKubeconfig writes a kubeconfig for user with a context named
// "testcluster", for handing the cluster to kubectl or a subprocess.
func (c *Cluster) WriteKubeconfig(path, user string) error {
	token, ok := c.tokens[user]
	if !ok {
		return fmt.Errorf("testcluster: unknown user %q", user)
	}
	const name = "testcluster"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.apiURL, CertificateAuthorityData: c.caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// waitReady polls check until it succeeds, p exits, ctx ends or timeout
// passes, whichever comes first. Failures carry the process log's tail,
// which is where the reason almost always is.
func waitReady(ctx context.Context, p *process, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during startup (%v); last %d log lines:\n%s", p.name, p.err, logTailLines, p.logTail(logTailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last check: %v): %w; last %d log lines:\n%s", p.name, last, ctx.Err(), logTailLines, p.logTail(logTailLines))
		case <-tick.C:
			if last = check(ctx); last == nil {
				return nil
			}
		}
	}
}

func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// freePorts reserves n distinct loopback ports by listening on them all at
// once before releasing them. Another process may still grab one before the
// server binds it; that shows up as a startup failure naming the port.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
