package benchdata

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// replayChildEnv tells a test binary that it was started by
// StartReplayProcess, and what to serve: "kind seed objects window".
const replayChildEnv = "KUBEWIRE_BENCH_REPLAY_CHILD"

// ReplayProcess is a Replay that runs in a child process, so that the CPU
// it spends writing the watch stream (and, when paced, its ticker's
// wake-ups) is not counted as the benchmarked process's, as in production,
// where the apiserver is a process of its own. The child is the current test
// binary run again; the binary's TestMain (or an init) must call
// ServeReplayChild first.
//
// The parent drives the child with one text line per command on the
// child's stdin: "play N", "ack N", "pace INTERVAL_NS N" and "cpu", which
// the child answers on its stdout. Commands are short and sent one at a
// time, so each is one small pipe write.
type ReplayProcess struct {
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	stdout       *bufio.Reader
	url          string
	frameBytes   int
	initialBytes int

	mu     sync.Mutex // one command at a time, so that a reply follows its request
	line   []byte
	err    error // the first command that could not be sent
	closed bool
}

// StartReplayProcess starts NewReplay(k, seed, objects, window) in a child
// process and returns once it serves. The child generates the same objects
// from the same code, so it serves the same bytes.
func StartReplayProcess(k Kind, seed uint64, objects, window int) (*ReplayProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// -test.run=^$ makes a binary that does not call ServeReplayChild run
	// nothing and exit, instead of running its tests as our child; the
	// missing greeting then says what is wrong.
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", replayChildEnv, k.Name, seed, objects, window))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the replay process: %w", err)
	}
	p := &ReplayProcess{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	greeting, err := p.stdout.ReadString('\n')
	f := strings.Fields(greeting)
	if err == nil && (len(f) != 4 || f[0] != "replay") {
		err = fmt.Errorf("it said %q; does the test binary call benchdata.ServeReplayChild first?", greeting)
	}
	if err == nil {
		p.url = f[1]
		p.frameBytes, err = strconv.Atoi(f[2])
		if err == nil {
			p.initialBytes, err = strconv.Atoi(f[3])
		}
	}
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("starting the replay process: %w", err)
	}
	return p, nil
}

// URL is the server's base URL, for rest.Config.Host.
func (p *ReplayProcess) URL() string { return p.url }

// InitialBytes is the JSON size of the initial objects, summed.
func (p *ReplayProcess) InitialBytes() int { return p.initialBytes }

// FrameBytes is the mean size of one live watch event on the wire.
func (p *ReplayProcess) FrameBytes() int { return p.frameBytes }

// Play releases n more live events.
func (p *ReplayProcess) Play(n int) { p.send("play", int64(n)) }

// Ack returns credit for n live events that reached the end of the pipeline.
func (p *ReplayProcess) Ack(n int) { p.send("ack", int64(n)) }

// Pace releases n more live events, one every interval, on a ticker in the
// child, and returns at once: the parent is not woken per event.
func (p *ReplayProcess) Pace(interval time.Duration, n int) {
	p.send("pace", int64(interval), int64(n))
}

// CPU is the user and system CPU time the child has used so far.
func (p *ReplayProcess) CPU() (time.Duration, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.sendLocked("cpu"); err != nil {
		return 0, err
	}
	reply, err := p.stdout.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("replay process: reading its CPU time: %w", err)
	}
	ns, ok := strings.CutPrefix(strings.TrimSpace(reply), "cpu ")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("replay process: %q is not a CPU time", reply)
	}
	return time.Duration(n), nil
}

// send writes one command. Play and Ack have no error to return, as
// Replay's have not; the first failure is kept for Close.
func (p *ReplayProcess) send(cmd string, args ...int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.sendLocked(cmd, args...); err != nil && p.err == nil {
		p.err = err
	}
}

func (p *ReplayProcess) sendLocked(cmd string, args ...int64) error {
	if p.closed {
		return errors.New("replay process: closed")
	}
	p.line = append(p.line[:0], cmd...)
	for _, a := range args {
		p.line = strconv.AppendInt(append(p.line, ' '), a, 10)
	}
	p.line = append(p.line, '\n')
	if _, err := p.stdin.Write(p.line); err != nil {
		return fmt.Errorf("replay process: %s: %w", cmd, err)
	}
	return nil
}

// Close ends the child by closing its stdin, waits for it to exit (killing
// it if it has not within 10 s), and reports a command that failed or an
// unclean exit. Closing again does nothing.
func (p *ReplayProcess) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.stdin.Close()
	kill := time.AfterFunc(10*time.Second, func() { p.cmd.Process.Kill() })
	defer kill.Stop()
	if err := p.cmd.Wait(); err != nil {
		return errors.Join(p.err, fmt.Errorf("replay process: %w", err))
	}
	return p.err
}

// ServeReplayChild returns at once unless this process was started by
// StartReplayProcess. If it was, it serves the replay until its stdin
// closes and exits without returning. Call it first thing in TestMain, or
// in an init, of every test binary that calls StartReplayProcess.
func ServeReplayChild() {
	spec, ok := os.LookupEnv(replayChildEnv)
	if !ok {
		return
	}
	if err := serveReplayChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchdata: replay process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveReplayChild(spec string, in io.Reader, out io.Writer) error {
	var name string
	var seed uint64
	var objects, window int
	if _, err := fmt.Sscan(spec, &name, &seed, &objects, &window); err != nil {
		return fmt.Errorf("%s=%q: %w", replayChildEnv, spec, err)
	}
	i := slices.IndexFunc(Kinds, func(k Kind) bool { return k.Name == name })
	if i < 0 {
		return fmt.Errorf("%s=%q: no kind %q", replayChildEnv, spec, name)
	}
	r := NewReplay(Kinds[i], seed, objects, window)
	defer r.Close()
	stop := make(chan struct{})
	defer close(stop)
	if _, err := fmt.Fprintf(out, "replay %s %d %d\n", r.URL(), r.FrameBytes(), r.InitialBytes()); err != nil {
		return err
	}
	s := bufio.NewScanner(in)
	for s.Scan() {
		cmd, args, _ := strings.Cut(s.Text(), " ")
		var n []int64
		for _, a := range strings.Fields(args) {
			v, err := strconv.ParseInt(a, 10, 64)
			if err != nil {
				return fmt.Errorf("command %q: %w", s.Text(), err)
			}
			n = append(n, v)
		}
		switch {
		case cmd == "play" && len(n) == 1:
			r.Play(int(n[0]))
		case cmd == "ack" && len(n) == 1:
			r.Ack(int(n[0]))
		case cmd == "pace" && len(n) == 2:
			go pace(r, time.Duration(n[0]), int(n[1]), stop)
		case cmd == "cpu" && len(n) == 0:
			if _, err := fmt.Fprintf(out, "cpu %d\n", int64(ProcessCPU())); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown command %q", s.Text())
		}
	}
	return s.Err()
}

// pace plays n events, one every interval, as the paced benchmarks did in
// the parent before the replay could run in a child.
func pace(r *Replay, interval time.Duration, n int, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for range n {
		r.Play(1)
		select {
		case <-t.C:
		case <-stop:
			return
		}
	}
}

// ProcessCPU is the user and system CPU time of this process so far: the
// benchmarks' cpu-µs/event, and the replay process's own.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
