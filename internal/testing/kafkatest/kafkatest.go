// Package kafkatest runs a real Apache Kafka broker (KRaft, one node that is
// both broker and controller) for end-to-end tests. The jars come from Maven
// Central once per machine, into a cache outside the repository; each broker
// gets free ports and a temporary directory, and is killed when its test
// ends (and when the test process dies, through Pdeathsig).
package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// Version is the Apache Kafka release the tests run against.
const Version = "4.1.1"

// clusterID is any 16 bytes in URL-safe base64; a test cluster needs no
// unique one.
const clusterID = "a3ViZXdpcmUtdGVzdC0xMQ"

// pom asks Maven for the broker and everything it needs at runtime.
const pom = `<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kubewire.test</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>` + Version + `</version>
    </dependency>
  </dependencies>
</project>
`

// Libs returns the directory holding the broker's jars, fetching them with
// Maven on first use. A file lock keeps concurrent test processes from
// fetching at the same time; a marker file makes a half-finished fetch
// count as absent.
func Libs() (string, error) {
	base := os.Getenv("KUBEWIRE_CACHE")
	if base == "" {
		home, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("kafkatest: cache dir: %w", err)
		}
		base = filepath.Join(home, "kubewire")
	}
	dir := filepath.Join(base, "kafka-"+Version)
	libs := filepath.Join(dir, "libs")
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return libs, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("kafkatest: lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(done); err == nil {
		return libs, nil // another process fetched them while we waited
	}
	work, err := os.MkdirTemp(dir, "fetch-")
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "pom.xml"), []byte(pom), 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	out := filepath.Join(work, "libs")
	cmd := exec.Command("mvn", "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+out)
	cmd.Dir = work
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kafkatest: mvn dependency:copy-dependencies for kafka_2.13:%s: %w\n%s", Version, err, b)
	}
	os.RemoveAll(libs)
	if err := os.Rename(out, libs); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	return libs, nil
}

// Broker is one running Kafka node.
type Broker struct {
	// Addr is host:port of the PLAINTEXT listener.
	Addr string
	// Libs is the directory of the jars, for running Java tools.
	Libs string

	// SSLAddr and SASLSSLAddr are host:port of the secured listeners that
	// Options asked for, else "".
	SSLAddr     string
	SASLSSLAddr string
	// CAFile is the PEM file of the CA that signed the broker's
	// certificate, when a TLS listener was asked for.
	CAFile string

	// ID is the broker's node.id: 1 for a lone broker, 1..n in a Cluster.
	ID int

	t     testing.TB
	host  string // the listeners' IP address
	dir   string
	extra []listener
	ca    *CA
	props string
	logf  string
	// jvm are the JVM options; nil means the lone broker's.
	jvm    []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Start formats storage and starts a broker, failing t if it is not ready
// within a minute. props are added to (and override) the server
// properties, for example "message.max.bytes" or "log.cleaner.backoff.ms".
func Start(t testing.TB, props map[string]string) *Broker {
	t.Helper()
	return StartWith(t, Options{Props: props})
}

// StartWith is Start with secured listeners (see Options). The PLAINTEXT
// listener at Addr is always there: the readiness check, topic creation and
// the tests' own readers use it, and it keeps the broker's inter-broker and
// controller traffic out of what a security test is about.
func StartWith(t testing.TB, o Options) *Broker {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatalf("kafkatest: java is required: %v", err)
	}
	libs, err := Libs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ps := testkit.FreePorts(t, 2)
	port, cport := ps[0], ps[1]
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	b := &Broker{
		Addr:  net.JoinHostPort(host, strconv.Itoa(port)),
		host:  host,
		Libs:  libs,
		ID:    1,
		t:     t,
		dir:   dir,
		props: filepath.Join(dir, "server.properties"),
		logf:  filepath.Join(dir, "broker.log"),
	}
	secure, formatArgs, err := b.secure(o)
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]string{
		"process.roles":                            "broker,controller",
		"node.id":                                  "1",
		"controller.quorum.bootstrap.servers":      "127.0.0.1:" + strconv.Itoa(cport),
		"listeners":                                "PLAINTEXT://" + b.Addr + ",CONTROLLER://127.0.0.1:" + strconv.Itoa(cport),
		"advertised.listeners":                     "PLAINTEXT://" + b.Addr,
		"controller.listener.names":                "CONTROLLER",
		"inter.broker.listener.name":               "PLAINTEXT",
		"listener.security.protocol.map":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                                 filepath.Join(dir, "data"),
		"num.partitions":                           "1",
		"offsets.topic.replication.factor":         "1",
		"transaction.state.log.replication.factor": "1",
		"transaction.state.log.min.isr":            "1",
		"group.initial.rebalance.delay.ms":         "0",
		"auto.create.topics.enable":                "false",
	}
	for k, v := range secure {
		p[k] = v
	}
	// The secured listeners join the PLAINTEXT and CONTROLLER ones.
	for _, l := range b.extra {
		p["listeners"] += "," + l.name + "://" + l.addr
		p["advertised.listeners"] += "," + l.name + "://" + l.addr
		p["listener.security.protocol.map"] += "," + l.name + ":" + l.protocol
	}
	for k, v := range o.Props {
		p[k] = v
	}
	var buf bytes.Buffer
	for k, v := range p {
		fmt.Fprintf(&buf, "%s=%s\n", k, escapeProperty(v))
	}
	if err := os.WriteFile(b.props, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	format := exec.Command("java", append([]string{"-cp", filepath.Join(libs, "*"), "kafka.tools.StorageTool",
		"format", "--standalone", "-t", clusterID, "-c", b.props}, formatArgs...)...)
	if out, err := format.CombinedOutput(); err != nil {
		t.Fatalf("kafkatest: format storage: %v\n%s", err, out)
	}
	t.Cleanup(b.Kill)
	b.start()
	return b
}

func (b *Broker) start() {
	b.t.Helper()
	if err := b.launch(); err != nil {
		b.t.Fatal(err)
	}
	if err := b.waitReady(); err != nil {
		b.t.Fatal(err)
	}
}

// launch starts the broker's process on its properties and data, without
// waiting for it to be ready: the nodes of a cluster must all be running
// before any of them is, since none is ready without a controller quorum.
func (b *Broker) launch() error {
	logf, err := os.OpenFile(b.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	jvm := b.jvm
	if jvm == nil {
		jvm = []string{"-Xmx512m", "-XX:+UseSerialGC"}
	}
	args := append(append([]string(nil), jvm...),
		"-Dlog4j2.configurationFile="+b.log4j(), "-cp", filepath.Join(b.Libs, "*"), "kafka.Kafka", b.props)
	cmd := exec.Command("java", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The broker must not outlive the test process, even one killed hard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkatest: start broker %d: %w", b.ID, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.mu.Lock()
	b.cmd, b.exited, b.paused = cmd, exited, false
	b.mu.Unlock()
	return nil
}

// waitReady waits for the launched broker to be ready (see ready), and
// says why not, with the tail of its log, if it is not.
func (b *Broker) waitReady() error {
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	if err := b.ready(exited); err != nil {
		return fmt.Errorf("kafkatest: broker %d at %s not ready: %v\n%s", b.ID, b.Addr, err, b.LogTail(8000))
	}
	return nil
}

// LogTail returns the last n bytes of the broker's log (WARN and above).
func (b *Broker) LogTail(n int) string {
	log, _ := os.ReadFile(b.logf)
	if len(log) > n {
		log = log[len(log)-n:]
	}
	return string(log)
}

// log4j writes a configuration that sends the broker's logs to stdout at
// WARN, so the log file stays small and readable.
func (b *Broker) log4j() string {
	f := filepath.Join(b.dir, "log4j2.yaml")
	const cfg = `Configuration:
  Appenders:
    Console:
      name: out
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: out
`
	os.WriteFile(f, []byte(cfg), 0o644)
	return f
}

// ready polls until the broker answers metadata with itself among the
// brokers (a cluster's broker is listed once the controller has unfenced
// it), or a minute passes, or the process exits.
func (b *Broker) ready(exited <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the broker process exited")
		case <-tick.C:
		}
		tr := &kafkago.Transport{DialTimeout: time.Second}
		c := &kafkago.Client{Addr: kafkago.TCP(b.Addr), Timeout: 2 * time.Second, Transport: tr}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		md, err := c.Metadata(ctx, &kafkago.MetadataRequest{})
		cancel()
		tr.CloseIdleConnections()
		if err == nil {
			for _, br := range md.Brokers {
				if br.ID == b.ID {
					return nil
				}
			}
			err = fmt.Errorf("node %d is not among the brokers yet", b.ID)
		}
		last = err
	}
	return fmt.Errorf("timed out: %v", last)
}

// Kill stops the broker with SIGKILL, as a crash would, and waits for it to
// exit. Its data stays for Restart.
func (b *Broker) Kill() {
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.cmd, b.paused = nil, false
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	// SIGKILL ends a stopped (paused) process too.
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart kills the broker and starts it again on the same ports and data.
func (b *Broker) Restart(t *testing.T) {
	t.Helper()
	b.Kill()
	b.Start(t)
}

// Start starts a broker that was killed or stopped again, on the same ports
// and data, and waits until it is ready.
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	if b.Running() {
		t.Fatalf("kafkatest: broker %d is running already", b.ID)
	}
	if err := b.launch(); err != nil {
		t.Fatal(err)
	}
	if err := b.waitReady(); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the broker with SIGTERM, which makes Kafka shut down in order
// (a controlled shutdown: the controller moves its partitions' leadership to
// other replicas first), and waits up to two minutes for it to exit. Its
// data stays for Start.
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	cmd, exited := b.cmd, b.exited
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		b.Kill()
		t.Fatalf("kafkatest: broker %d did not exit within 2 minutes of SIGTERM\n%s", b.ID, b.LogTail(8000))
	}
	b.mu.Lock()
	if b.cmd == cmd {
		b.cmd, b.paused = nil, false
	}
	b.mu.Unlock()
}

// Pause stops the broker's process with SIGSTOP: it keeps its connections
// and answers nothing, as a broker in a long garbage collection pause or on
// a frozen machine would.
func (b *Broker) Pause() {
	b.signal(syscall.SIGSTOP, true)
}

// Resume continues a paused broker with SIGCONT.
func (b *Broker) Resume() {
	b.signal(syscall.SIGCONT, false)
}

func (b *Broker) signal(sig syscall.Signal, paused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.cmd.Process.Signal(sig)
		b.paused = paused
	}
}

// Running reports whether the broker's process was started and has not
// been killed or stopped (it may be paused).
func (b *Broker) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// Live reports whether the broker is running and not paused: whether it
// can answer requests.
func (b *Broker) Live() bool {
	b.mu.Lock()
	paused := b.paused
	b.mu.Unlock()
	return !paused && b.Running()
}

// RSS returns the resident memory of the broker's process in bytes, or 0
// if it is not running.
func (b *Broker) RSS() int64 {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	if cmd == nil {
		return 0
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Java runs a single-file Java program (Java 11+ source launch) with the
// broker's jars on the class path and returns its standard output.
func (b *Broker) Java(ctx context.Context, source string, args ...string) (string, error) {
	f := filepath.Join(b.dir, "Main.java")
	if err := os.WriteFile(f, []byte(source), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", filepath.Join(b.Libs, "*"), f}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("java %s: %w\n%s", f, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
