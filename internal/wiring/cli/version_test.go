package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/version"
	"github.com/kubewire/kubewire/internal/wiring/cli"
)

func TestVersionPrintsTheBuildAsTextOrJSONAndRejectsOtherFormats(t *testing.T) {
	info := version.Get()
	text := fmt.Sprintf("kubewire %s\ncommit:   %s\nbuilt:    %s\ngo:       %s\nplatform: %s\n",
		info.Version, info.Commit, info.Date, info.GoVersion, info.Platform)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, stdout, stderr string)
	}{
		{
			name:     "the default prints version, commit, build date, Go version and platform, one per line",
			args:     []string{"version"},
			wantCode: cli.ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				if stdout != text {
					t.Errorf("stdout\n%s\nwant\n%s", stdout, text)
				}
			},
		},
		{
			name:     "-o text is the default spelled out",
			args:     []string{"version", "-o", "text"},
			wantCode: cli.ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				if stdout != text {
					t.Errorf("stdout\n%s\nwant\n%s", stdout, text)
				}
			},
		},
		{
			name:     "-o json prints one JSON object with every field",
			args:     []string{"version", "-o", "json"},
			wantCode: cli.ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				var fields map[string]string
				if err := json.Unmarshal([]byte(stdout), &fields); err != nil {
					t.Fatalf("stdout is not a JSON object of strings: %v\n%s", err, stdout)
				}
				want := map[string]string{
					"version": info.Version, "commit": info.Commit, "date": info.Date,
					"goVersion": info.GoVersion, "platform": info.Platform,
				}
				if len(fields) != len(want) {
					t.Errorf("JSON has fields %v, want exactly %v", fields, want)
				}
				for k, v := range want {
					if fields[k] != v {
						t.Errorf("JSON %s = %q, want %q", k, fields[k], v)
					}
				}
			},
		},
		{
			name:     "--output=json is the long form",
			args:     []string{"version", "--output=json"},
			wantCode: cli.ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				if !json.Valid([]byte(stdout)) {
					t.Errorf("stdout is not JSON:\n%s", stdout)
				}
			},
		},
		{
			name:     "another output format is a usage error that names the flag and the choices",
			args:     []string{"version", "-o", "yaml"},
			wantCode: cli.ExitConfig,
			check: func(t *testing.T, stdout, stderr string) {
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				for _, m := range []string{"--output", `"yaml"`, "text or json"} {
					if !strings.Contains(stderr, m) {
						t.Errorf("stderr does not mention %s: %q", m, stderr)
					}
				}
			},
		},
		{
			name:     "an argument is a usage error",
			args:     []string{"version", "json"},
			wantCode: cli.ExitConfig,
			check:    func(*testing.T, string, string) {},
		},
		{
			name:     "the help shows examples of both formats",
			args:     []string{"version", "--help"},
			wantCode: cli.ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				for _, m := range []string{"Examples:", "kubewire version\n", "kubewire version -o json"} {
					if !strings.Contains(stdout, m) {
						t.Errorf("help lacks %q:\n%s", m, stdout)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stdout %q, stderr %q", code, tt.wantCode, stdout, stderr)
			}
			tt.check(t, stdout, stderr)
		})
	}
}
