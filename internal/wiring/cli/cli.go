// Package cli is kubewire's command line: flags, logging, signals and exit
// codes. cmd/kubewire only calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/internal/base/checkpoint"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/leader"
	"github.com/kubewire/kubewire/internal/base/metrics"
	"github.com/kubewire/kubewire/internal/base/procs"
	"github.com/kubewire/kubewire/internal/base/version"
	"github.com/kubewire/kubewire/internal/wiring/app"
	"github.com/kubewire/kubewire/internal/wiring/verify"
	"github.com/kubewire/kubewire/sinks"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1
	// ExitConfig means the configuration (file or flags) is invalid.
	ExitConfig = 2
	// ExitDiverged means `kubewire verify` found divergent keys or order
	// violations.
	ExitDiverged = 3
)

// errDiverged is returned by verify after it printed the differences.
var errDiverged = errors.New("the sink's contents diverge from the cluster")

// errUndelivered is returned by run when events were left neither
// delivered nor drained at shutdown: a supervisor must see that as a
// failure, not a clean stop.
var errUndelivered = errors.New("events were not delivered before the drain deadline")

// runApp runs the app; tests replace it to decide how a run ends.
var runApp = (*app.App).Run

// runVerify reads a sink back and compares it with the cluster; tests
// replace it to decide what verify finds.
var runVerify = verify.Run

// shutdownResult turns how a run ended into run's error, logging the
// reason when the process will exit 1 for events it could not deliver.
func shutdownResult(log *slog.Logger, undelivered int, err error) error {
	if undelivered > 0 {
		err = errors.Join(err, fmt.Errorf("%d %w", undelivered, errUndelivered))
	}
	if err != nil {
		log.Error("shutdown lost events; exiting with code 1", "undelivered", undelivered, "err", err)
	}
	return err
}

// usageError is a bad flag or argument; it exits like a config error.
type usageError struct{ error }

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

// unknownCommand rejects a first argument that names no command, with
// cobra's suggestions.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{fmt.Errorf("%s (run '%s --help' for the commands)", msg, cmd.CommandPath())}
}

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var ce *config.Error
	var ue usageError
	var un unanswerable
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ce):
		fmt.Fprintln(stderr, "invalid configuration:")
		fmt.Fprintln(stderr, indent(ce.Error()))
		return ExitConfig
	case errors.Is(err, errDiverged):
		fmt.Fprintln(stderr, "verify:", err)
		return ExitDiverged
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "error:", err)
		return ExitConfig
	case errors.As(err, &un):
		fmt.Fprintln(stderr, "error:", err)
		return un.code
	default:
		fmt.Fprintln(stderr, "error:", err)
		return ExitFailed
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

type globalFlags struct {
	logLevel  string
	logFormat string
}

// NewRoot builds the command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "kubewire",
		Short:         "Stream Kubernetes object changes into Kafka and NATS as CloudEvents",
		SilenceUsage:  true,
		SilenceErrors: true,
		Example: `  # check a config, then stream with the current kubeconfig context
  kubewire validate --config kubewire.yaml
  kubewire run --config kubewire.yaml

  # compare what a sink holds with the cluster
  kubewire verify --config kubewire.yaml --sink events`,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// Without Args, cobra reports an unknown command as a plain error,
	// which would exit 1; it is a command line error, so exit 2.
	root.Args = unknownCommand
	root.SuggestionsMinimumDistance = 2
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newRun(g, stdout, stderr), newValidate(stdout, stderr), newVerify(g, stdout, stderr), newVersion(stdout))
	root.AddCommand(newTail(g, stdout, stderr), newHistory(g, stdout, stderr))
	return root
}

func newVerify(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var path, kubeconfig, kubecontext, sink string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "verify --config FILE --sink NAME",
		Short: "Read a sink's topic or stream from the beginning and compare it with the cluster; exit 3 if they diverge",
		Example: `  # compare the kafka sink "events" with the cluster of the current context
  kubewire verify --config kubewire.yaml --sink events

  # another cluster, and more time for a large topic
  kubewire verify --config kubewire.yaml --sink events --kubeconfig ~/.kube/prod --context prod --timeout 15m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" || sink == "" {
				return usageError{errors.New("--config and --sink are required")}
			}
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: must be greater than 0", timeout)}
			}
			if _, err := g.logger(stderr); err != nil {
				return err
			}
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			if err := readableSink(cfg, sink, "compare"); err != nil {
				return err
			}
			rc, _, err := restConfig(kubeconfig, kubecontext)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			rep, err := runVerify(ctx, verify.Options{Config: cfg, Sink: sink, REST: rc})
			if err != nil {
				return err
			}
			rep.Print(stdout)
			if rep.Diverged() {
				return errDiverged
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "path to the config file (required)")
	cmd.Flags().StringVar(&sink, "sink", "", "name of the kafka or jetstream sink to read (required)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config, then in-cluster")
	cmd.Flags().StringVar(&kubecontext, "context", "", "kubeconfig context to use instead of the current one")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "give up after this long")
	return cmd
}

func newVersion(stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version",
		Example: `  # what is running, for a bug report
  kubewire version

  # the same as one JSON object, for scripts
  kubewire version -o json | jq -r .commit`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			switch output {
			case "text":
				_, err := fmt.Fprintf(stdout, "kubewire %s\ncommit:   %s\nbuilt:    %s\ngo:       %s\nplatform: %s\n",
					info.Version, info.Commit, info.Date, info.GoVersion, info.Platform)
				return err
			case "json":
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			default:
				return usageError{fmt.Errorf("--output %q: want text or json", output)}
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func newRun(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var path, kubeconfig, kubecontext, httpAddr, profiling, checkpointFlag string
	var el electionFlags
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Watch the configured resources and stream their changes to the sinks",
		Example: `  # outside a cluster: the current kubeconfig context, logs as JSON
  kubewire run --config kubewire.yaml --log-format json

  # one of several replicas in a pod: in-cluster config, only the leader publishes
  kubewire run --config /etc/kubewire/config.yaml --leader-elect --leader-election-namespace kubewire`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageError{errors.New("--config is required")}
			}
			if err := checkListenAddress("--http-address", httpAddr); err != nil {
				return err
			}
			if err := checkListenAddress("--profiling", profiling); err != nil {
				return err
			}
			log, err := g.logger(stderr)
			if err != nil {
				return err
			}
			cfg, err := loadConfig(path)
			if err != nil {
				return err
			}
			var lc leader.Config
			if el.enabled {
				if lc, err = el.config(); err != nil {
					return err
				}
			}
			cpNamespace, cpName, err := checkpointLocation(checkpointFlag, el.enabled, lc)
			if err != nil {
				return err
			}
			rc, contextName, err := restConfig(kubeconfig, kubecontext)
			if err != nil {
				return err
			}
			// Signals are caught before the line that says kubewire is
			// starting: a SIGTERM sent as soon as it shows (a rollout, a
			// test) drains instead of killing the process.
			ctx, stop := signalContext(log)
			defer stop()
			logStartup(log, rc, contextName, cfg)
			go procs.Adapt(ctx, log)
			opts := app.Options{Config: cfg, REST: rc, Logger: log, Stdout: stdout}
			if el.enabled {
				opts.OwnLeases = append(opts.OwnLeases, lc.LeaseName)
			}
			if cpName != "" {
				opts.OwnLeases = append(opts.OwnLeases, cpName)
				if opts.Checkpoint, err = checkpoint.New(rc, cpNamespace, cpName, log); err != nil {
					return err
				}
				log.Info("watches resume from the checkpoint", "lease", opts.Checkpoint.Name())
			}
			a, err := app.New(opts)
			if err != nil {
				return err
			}
			status := a.Readiness
			if el.enabled {
				// A standby runs no informers and is healthy as it is.
				status = func() app.Readiness {
					if !leader.IsLeader() {
						return app.Readiness{Ready: true}
					}
					return a.Readiness()
				}
			}
			if httpAddr != "" {
				bound, err := app.ServeHTTPReadiness(ctx, httpAddr, status, log)
				if err != nil {
					return fmt.Errorf("--http-address %q: %w", httpAddr, err)
				}
				log.Info("serving /metrics, /healthz and /readyz", "address", bound.String())
			}
			if profiling != "" {
				bound, err := app.ServeProfiling(ctx, profiling, log)
				if err != nil {
					return fmt.Errorf("--profiling %q: %w", profiling, err)
				}
				log.Warn("serving /debug/pprof/; a heap profile can hold object data that redaction removes from events", "address", bound.String())
			}
			if !el.enabled {
				metrics.IsLeader.Set(1)
				n, err := runApp(a, ctx)
				return shutdownResult(log, n, err)
			}
			// lead may still be running when a lost lease ends leader.Run.
			runErr := make(chan error, 1)
			err = leader.Run(ctx, rc, lc, log, func(ctx context.Context) {
				n, err := runApp(a, ctx)
				runErr <- shutdownResult(log, n, err)
			})
			select {
			case e := <-runErr:
				err = errors.Join(err, e)
			default:
			}
			return err
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "path to the config file (required)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config, then in-cluster")
	cmd.Flags().StringVar(&kubecontext, "context", "", "kubeconfig context to use instead of the current one")
	cmd.Flags().StringVar(&httpAddr, "http-address", ":9090", `address for /metrics, /healthz and /readyz; "" disables`)
	cmd.Flags().StringVar(&profiling, "profiling", "", "serve net/http/pprof at this address, on a listener of its own; off unless given, and bare --profiling means "+app.DefaultProfilingAddress)
	cmd.Flags().Lookup("profiling").NoOptDefVal = app.DefaultProfilingAddress
	cmd.Flags().StringVar(&checkpointFlag, "checkpoint", "", `NAMESPACE/NAME of the Lease where the watches' checkpoints are kept, so that a restart resumes every watch without losing a version; with --leader-elect the default is the Lease's namespace and "<leader-election-id>-checkpoint", else off; "off" turns it off`)
	el.register(cmd)
	return cmd
}

// electionFlags configure leader election for running several replicas.
type electionFlags struct {
	enabled             bool
	id, namespace       string
	lease, renew, retry time.Duration
}

func (f *electionFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.enabled, "leader-elect", false, "run as one of several replicas; only the holder of the Lease publishes")
	fl.StringVar(&f.id, "leader-election-id", "kubewire", "name of the coordination.k8s.io Lease")
	fl.StringVar(&f.namespace, "leader-election-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, then the service account's namespace)")
	fl.DurationVar(&f.lease, "leader-election-lease-duration", 15*time.Second, "how long a standby waits after the last renewal before taking over")
	fl.DurationVar(&f.renew, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops")
	fl.DurationVar(&f.retry, "leader-election-retry-period", 2*time.Second, "how often to try to acquire or renew the Lease")
}

func (f *electionFlags) config() (leader.Config, error) {
	ns := f.namespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	switch {
	case ns == "":
		return leader.Config{}, usageError{errors.New("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE) outside a cluster")}
	case f.lease <= f.renew || f.renew <= f.retry || f.retry <= 0:
		return leader.Config{}, usageError{fmt.Errorf("leader election durations must satisfy lease (%s) > renew deadline (%s) > retry period (%s) > 0", f.lease, f.renew, f.retry)}
	}
	return leader.Config{LeaseName: f.id, Namespace: ns, LeaseDuration: f.lease, RenewDeadline: f.renew, RetryPeriod: f.retry}, nil
}

// checkpointLocation is where the checkpoint ConfigMap is, or "" for none.
func checkpointLocation(flag string, elected bool, lc leader.Config) (namespace, name string, err error) {
	switch {
	case flag == "off":
		return "", "", nil
	case flag == "" && elected:
		return lc.Namespace, lc.LeaseName + "-checkpoint", nil
	case flag == "":
		return "", "", nil
	}
	ns, name, ok := strings.Cut(flag, "/")
	if !ok || ns == "" || name == "" || len(validation.IsDNS1123Subdomain(name)) > 0 || len(validation.IsDNS1123Label(ns)) > 0 {
		return "", "", usageError{fmt.Errorf("--checkpoint %q: want NAMESPACE/NAME of a Lease, or off", flag)}
	}
	return ns, name, nil
}

// loadConfig loads the config file. A file that cannot be read (missing,
// a directory, no permission) is a usage error: the path on the command
// line is wrong, and retrying will not help.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path, app.DefaultRegistry())
	var ce *config.Error
	switch {
	case err != nil && errors.As(err, &ce) && looksLikeHelmValues(path):
		// Listing config:, image: and the rest as unknown fields would
		// hide the one thing to say.
		return nil, usageError{fmt.Errorf("--config %s: this looks like Helm values; the kubewire config is under `config:` (put that block in a file of its own to check or run it)", path)}
	case err == nil || errors.As(err, &ce):
		return cfg, err
	case isDir(path):
		return nil, usageError{fmt.Errorf("--config %s is a directory; give the path of the config file", path)}
	default:
		return nil, usageError{fmt.Errorf("--config %s: %w", path, err)}
	}
}

// looksLikeHelmValues reports whether the file is values for kubewire's
// chart: a top-level config: mapping, and no apiVersion beside it.
func looksLikeHelmValues(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(b, &top) != nil {
		return false
	}
	_, hasAPIVersion := top["apiVersion"]
	inner, ok := top["config"].(map[string]any)
	return ok && !hasAPIVersion && (inner["apiVersion"] != nil || inner["resources"] != nil || inner["sinks"] != nil)
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// readableSink checks, before anything connects, that verify or tail can
// read the sink named: it exists, keeps what it is sent, and receives at
// least one resource. purpose ends the last message: "nothing to <purpose>".
func readableSink(cfg *config.Config, name, purpose string) error {
	sc, ok := cfg.Sink(name)
	if !ok {
		names := make([]string, len(cfg.Sinks))
		for i, s := range cfg.Sinks {
			names[i] = strconv.Quote(s.Name)
		}
		return usageError{fmt.Errorf("--sink %q: no such sink in the config (defined: %s)", name, strings.Join(names, ", "))}
	}
	if _, ok := sc.Block.(sinks.Reader); !ok {
		return usageError{fmt.Errorf("--sink %q: a %s sink keeps nothing to read back; name a kafka or nats (jetstream) sink", name, sc.Type)}
	}
	for _, r := range cfg.Resources {
		if slices.Contains(r.Sinks, name) {
			return nil
		}
	}
	return usageError{fmt.Errorf("--sink %q: no resource is routed to this sink, so there is nothing to %s", name, purpose)}
}

// openSink is what the commands that read a sink back (tail, history)
// do first: check the logging flags, load the config, and find the sink,
// which must keep what it was sent and have resources routed to it.
func openSink(g *globalFlags, stderr io.Writer, path, name string) (*config.Config, *config.Sink, error) {
	if _, err := g.logger(stderr); err != nil {
		return nil, nil, err
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	if err := readableSink(cfg, name, "read"); err != nil {
		return nil, nil, err
	}
	sc, _ := cfg.Sink(name)
	return cfg, sc, nil
}

// checkListenAddress rejects an address that net.Listen could never bind,
// so that a typo exits 2 before anything starts. "" (disabled) is fine.
func checkListenAddress(flag, addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return usageError{fmt.Errorf("%s %q: must be host:port or :port, such as \":9090\": %w", flag, addr, err)}
	}
	return nil
}

// restConfig follows client-go's standard loading rules: an explicit
// --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster
// service account. It reads only local files and the environment, so every
// failure is a usage error: a path, a context or the environment is wrong.
// It also returns the name of the context used, or "in-cluster".
func restConfig(kubeconfig, kubecontext string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	if kubeconfig == "" {
		// client-go skips $KUBECONFIG files that do not exist, and then
		// fails with a message that names neither the variable nor a file.
		if err := kubeconfigEnvExists(rules.Precedence); err != nil {
			return nil, "", err
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubecontext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	rc, err := cc.ClientConfig()
	if err != nil {
		from := "from --kubeconfig " + kubeconfig
		switch env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
		case kubeconfig != "":
		case env != "":
			from = "from $KUBECONFIG " + env
		default:
			from = "(tried ~/.kube/config and the in-cluster service account; set --kubeconfig or $KUBECONFIG)"
		}
		return nil, "", usageError{fmt.Errorf("finding the cluster %s: %w", from, err)}
	}
	rawDial(rc)
	// client-go falls back to the service account only when no kubeconfig
	// names a context.
	contextName := "in-cluster"
	if raw, err := cc.RawConfig(); err == nil {
		if kubecontext != "" {
			contextName = kubecontext
		} else if raw.CurrentContext != "" {
			contextName = raw.CurrentContext
		}
	}
	return rc, contextName, nil
}

// kubeconfigEnvExists reports an error naming $KUBECONFIG when it is set
// and none of the files it lists exists.
func kubeconfigEnvExists(paths []string) error {
	env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
	if env == "" {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	return usageError{fmt.Errorf("finding the cluster: $KUBECONFIG is %q, and no file it lists exists", env)}
}

// signalContext is cancelled by the first SIGINT or SIGTERM, which starts a
// graceful drain. A second signal exits at once, for an operator who will not
// wait for the drain.
func signalContext(log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			log.Info("shutting down; draining in-flight events (signal again to exit at once)", "signal", s.String())
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-ch:
			log.Warn("second signal; exiting without draining", "signal", s.String())
			os.Exit(ExitFailed)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
