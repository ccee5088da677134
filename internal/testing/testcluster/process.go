package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

const stopGrace = 10 * time.Second

// process is a server child process whose exit is observed by a single
// goroutine, so that stop and readiness checks can select on it.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once Wait returned
	err     error         // Wait's result, valid after done
}

// startProcess runs bin with args, appending its output to logPath. Appending
// keeps the log of earlier runs when the apiserver is restarted.
func startProcess(name, bin, logPath string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	defer log.Close() // the child has its own copy of the descriptor

	cmd := exec.Command(bin, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Kill the server if the test binary dies without calling Stop, so
		// that an interrupted run does not leave ports and CPU occupied.
		Pdeathsig: syscall.SIGKILL,
		// Its own group, so that a Ctrl-C aimed at `go test` does not hit the
		// server before Stop gets to shut it down in order.
		Setpgid: true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to terminate, gives it stopGrace to shut down
// cleanly and kills it after that. It returns once the process is reaped.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return fmt.Errorf("%s did not exit within %s of SIGTERM: %w", p.name, stopGrace, errKilled)
}

// errKilled reports that a process had to be killed. It is stopped all the
// same, so callers that only need it gone treat this as information.
var errKilled = errors.New("killed")

// signal signals the whole process group, in case the server forked helpers.
func (p *process) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.pid(), sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %s to %s: %w", sig, p.name, err)
	}
	return nil
}

// logTail returns the last n lines of the process log for error messages.
func (p *process) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	b = bytes.TrimRight(b, "\n")
	for i, cut := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			if cut++; cut == n {
				b = b[i+1:]
				break
			}
		}
	}
	return string(b)
}
