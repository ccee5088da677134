package cli_test

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kubewire/kubewire/internal/wiring/cli"
)

func TestEveryCommandsHelpHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		// cobra adds help and completion; they are cobra's, not ours.
		if c.Name() == "help" || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		seen++
		t.Run(c.CommandPath(), func(t *testing.T) {
			if strings.TrimSpace(c.Example) == "" {
				t.Fatalf("%s has no Example", c.CommandPath())
			}
			if !strings.Contains(c.Example, "kubewire") {
				t.Errorf("%s's Example shows no kubewire command line:\n%s", c.CommandPath(), c.Example)
			}
		})
	}
	root := cli.NewRoot(io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	walk(root)
	if seen < 4 {
		t.Fatalf("walked %d commands, want at least root, run, validate and verify", seen)
	}
}

func TestHelpPrintsTheExamplesSection(t *testing.T) {
	for _, cmd := range []string{"run", "validate", "verify", "tail", "history"} {
		code, out, errOut := run(cmd, "--help")
		if code != cli.ExitOK || !strings.Contains(out, "Examples:\n  # ") {
			t.Errorf("%s --help: exit %d, no Examples section:\n%s%s", cmd, code, out, errOut)
		}
	}
}
