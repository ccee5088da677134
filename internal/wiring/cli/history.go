package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// Exit codes of `kubewire history` when the stream cannot answer: each
// case has its own, so that a script tells them apart without reading
// the message.
const (
	// ExitNoSnapshot: no complete snapshot before the point is left.
	ExitNoSnapshot = 4
	// ExitWatchGap: a declared watch gap overlaps the range.
	ExitWatchGap = 5
	// ExitCompacted: the topic is compacted, so versions are missing.
	ExitCompacted = 6
	// ExitNotWhole: the events do not hold the whole object, or a filter
	// left objects out (payload reference or diff, a reference event, a
	// filter).
	ExitNotWhole = 7
	// ExitIncomplete: the snapshots before the point are incomplete.
	ExitIncomplete = 8
)

// unanswerable is a point the stream cannot answer for; code is its exit
// code.
type unanswerable struct {
	code int
	err  error
}

func (u unanswerable) Error() string { return u.err.Error() }
func (u unanswerable) Unwrap() error { return u.err }

var errCompacted = errors.New("the topic is compacted")

type historyFlags struct {
	path, sink, at, output, resource string
	since, until                     string
	namespaces, names                []string
	selector                         string
	margin                           time.Duration
}

func newHistory(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var f historyFlags
	cmd := &cobra.Command{
		Use:   "history --config FILE --sink NAME (--at POINT | RESOURCE/[NAMESPACE/]NAME [--since POINT] [--until POINT])",
		Short: "Print the objects as they were at a point in the past, or every version of one object, read back from a sink's topic or stream",
		Long: `Print the objects of the resources routed to a kafka sink, or a nats sink in
jetstream mode, as they were at POINT, read back from the sink's topic or
stream: from the last complete snapshot before POINT, and every change up to
it. Each partition is read only until nothing after can change the answer.

With an object instead of --at (configmaps/team-a/web, or nodes/n1 for a
cluster-scoped one; the resource as --resource takes it), print every
version of that object between --since and --until (each a POINT, both
optional), in resourceVersion order: its time, the change, the field
manager that wrote it (BY), and the fields it changed. Each change is shown
once; a snapshot record (synced) only where it carries a version no event
before it did. The field manager is the client that wrote the object
(kubectl, helm, a controller), not the user: only the API server's audit
log knows who made a change. -o json prints one line per version with its
time, type, changedby, resourceVersion and the object; -o yaml the same as
YAML documents. When a declared watch gap overlaps the range, history
prints the versions it read and then exits 5 naming the gap's range: those
versions are real, but others may be missing.

POINT is a resourceVersion (rv:N), an RFC 3339 time (2026-11-23T10:00:00Z)
or a time relative to now (-1h, -90m). A resourceVersion is exact. A time is
an approximation: an event's time is when kubewire observed the change, which
after an outage or a spool replay is later than the change itself. history
turns the time into the highest resourceVersion observed at or before it and
answers for that version. The topic is read from before the point by the
resource's snapshotInterval plus --margin (further back while no snapshot is
found): Kafka finds an offset by time only as the first record stamped at or
after it, and timestamps need not rise within a partition; JetStream finds a
message by the time the server stored it.

history says so, and exits with a code of its own, when the topic cannot
answer: 4 no complete snapshot before POINT is left (retention), 5 a declared
watch gap overlaps the range, 6 the topic is compacted (its cleanup.policy)
or the stream keeps a few messages per subject (max_msgs_per_subject),
7 the events do not carry whole objects (payload reference or diff, a
reference event) or a filter leaves objects out, 8 the snapshots before
POINT are marked incomplete.

-o table prints a row per object as tail does (the event that set it);
-o json prints each object as one JSON line, -o yaml as YAML documents.`,
		Example: `  # the ConfigMaps of team-a as they were an hour ago
  kubewire history --config kubewire.yaml --sink events --at -1h --resource configmaps --namespace team-a

  # one object at an exact resourceVersion, as YAML
  kubewire history --config kubewire.yaml --sink events --at rv:48211 --name web -o yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("%s takes at most one object, got %q", cmd.CommandPath(), args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return runObjectHistoryCmd(g, f, args[0], stdout, stderr)
			}
			if f.since != "" || f.until != "" {
				return usageError{errors.New("--since and --until go with an object (RESOURCE/NAMESPACE/NAME); for the state at a point, use --at")}
			}
			if f.path == "" || f.sink == "" || f.at == "" {
				return usageError{errors.New("--config, --sink and --at are required")}
			}
			if !slices.Contains([]string{"table", "json", "yaml"}, f.output) {
				return usageError{fmt.Errorf("-o %q: must be table, json or yaml", f.output)}
			}
			pt, err := parsePoint("--at", f.at, time.Now())
			if err != nil {
				return usageError{err}
			}
			sel, err := labels.Parse(f.selector)
			if err != nil {
				return usageError{fmt.Errorf("--selector %q: %w", f.selector, err)}
			}
			cfg, sc, err := openSink(g, stderr, f.path, f.sink)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			switch blk := sc.Block.(type) {
			case *kafka.Config:
				return runHistory(ctx, cfg, sc.Name, blk, f, pt, sel, stdout, stderr)
			case *kwnats.Config:
				return runHistoryJetStream(ctx, cfg, sc.Name, blk, f, pt, sel, stdout, stderr)
			}
			return usageError{fmt.Errorf("--sink %q: history reads kafka and nats (jetstream) sinks; this is a %s sink", f.sink, sc.Type)}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.path, "config", "", "path to the config file (required)")
	fl.StringVar(&f.sink, "sink", "", "name of the kafka or jetstream sink to read (required)")
	fl.StringVar(&f.at, "at", "", "the point: rv:N, an RFC 3339 time, or a relative time such as -1h (required without an object)")
	fl.StringVar(&f.since, "since", "", "with an object: the versions from this point (rv:N, RFC 3339 or -1h); default: the oldest the topic or stream keeps")
	fl.StringVar(&f.until, "until", "", "with an object: the versions up to this point, inclusive; default: the newest")
	fl.StringVar(&f.resource, "resource", "", "only this resource: its name (configmaps) or name.group (widgets.demo.kubewire.io)")
	fl.StringSliceVar(&f.namespaces, "namespace", nil, "only objects of these namespaces (repeatable, or a comma list)")
	fl.StringSliceVar(&f.names, "name", nil, "only objects with these names (repeatable, or a comma list)")
	fl.StringVarP(&f.selector, "selector", "l", "", "only objects whose labels match this selector, as kubectl -l")
	fl.DurationVar(&f.margin, "margin", 10*time.Minute, "how much further back than snapshotInterval to start reading, for a snapshot's duration and delivery lag")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// point is what --at names: a resourceVersion, or a time.
type point struct {
	rv uint64
	at time.Time
}

// parsePoint reads the value s of flag.
func parsePoint(flag, s string, now time.Time) (point, error) {
	if v, ok := strings.CutPrefix(s, "rv:"); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return point{}, fmt.Errorf("%s %q: rv: takes a resourceVersion, a positive decimal number", flag, s)
		}
		return point{rv: n}, nil
	}
	if strings.HasPrefix(s, "-") {
		d, err := time.ParseDuration(s[1:])
		if err != nil || d <= 0 {
			return point{}, fmt.Errorf("%s %q: a relative time is a duration before now, such as -1h or -90m", flag, s)
		}
		return point{at: now.Add(-d)}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return point{}, fmt.Errorf("%s %q: want rv:N, an RFC 3339 time (2026-11-23T10:00:00Z) or a relative time (-1h)", flag, s)
	}
	return point{at: t}, nil
}

// historyResource is one resource routed to the sink, with its topic.
type historyResource struct {
	rc     *config.Resource
	prefix string
	topic  string
}

func runHistory(ctx context.Context, cfg *config.Config, sink string, blk *kafka.Config, f historyFlags, pt point,
	sel labels.Selector, stdout, stderr io.Writer,
) error {
	k := blk.Defaulted()
	res, err := historyResources(cfg, sink, f.resource, func(rc *config.Resource) string {
		return kafka.TopicName(k.Topic, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
	})
	if err != nil {
		return err
	}
	d, client, err := historyClient(blk)
	if err != nil {
		return err
	}
	for _, r := range res {
		if err := notCompacted(ctx, client, r.topic); err != nil {
			return err
		}
	}
	p := &tailPrinter{out: stdout, errOut: stderr, format: f.output, filter: &tailFilter{namespaces: f.namespaces, names: f.names}, done: func() {}, changes: newChangeTracker()}
	if f.output == "table" {
		p.header()
	}
	for _, r := range res {
		h, err := consumer.HistoryAt(ctx, consumer.HistoryConfig{
			Brokers: k.Brokers, Topic: r.topic, Dialer: d, Resource: r.prefix, RV: pt.rv, At: pt.at,
			Lookback: r.rc.SnapshotInterval.Duration + f.margin,
			// One watch per namespace only when there are several.
			WatchPerNamespace: r.rc.PerNamespaceWatch() && len(r.rc.Namespaces) > 1,
		})
		if err != nil {
			return historyError(sink, err)
		}
		fmt.Fprintf(stderr, "history: %s at resourceVersion %d, from snapshot %s (at %d) in topic %s, %d records read\n", r.prefix, h.RV, h.Snapshot, h.SnapshotRV, r.topic, h.Read)
		printHistory(p, h, sel)
		if p.err != nil {
			return p.err
		}
	}
	return nil
}

// historyResources are the resources routed to the sink, only the one
// named resource (its name, or name.group) unless that is "", each with
// where its events are (from), once the config shows the stream can answer
// for them.
func historyResources(cfg *config.Config, sink, resource string, from func(*config.Resource) string) ([]historyResource, error) {
	var res []historyResource
	for i := range cfg.Resources {
		rc := &cfg.Resources[i]
		if !slices.Contains(rc.Sinks, sink) {
			continue
		}
		prefix := rc.Resource
		if rc.Group != "" {
			prefix += "." + rc.Group
		}
		if resource != "" && resource != rc.Resource && resource != prefix {
			continue
		}
		res = append(res, historyResource{rc: rc, prefix: prefix, topic: from(rc)})
	}
	if len(res) == 0 {
		return nil, usageError{fmt.Errorf("no resource %q is routed to sink %q", resource, sink)}
	}
	for _, r := range res {
		if err := wholeObjects(r); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// historyClient dials the sink's brokers as the sink does: d for
// reading, client for the topics' configs.
func historyClient(blk *kafka.Config) (*kafkago.Dialer, *kafkago.Client, error) {
	k := blk.Defaulted()
	d, err := kafka.Dialer(blk)
	if err != nil {
		return nil, nil, err
	}
	return d, &kafkago.Client{
		Addr:      kafkago.TCP(k.Brokers...),
		Transport: &kafkago.Transport{TLS: d.TLS, SASL: d.SASLMechanism, ClientID: d.ClientID, DialTimeout: d.Timeout},
		Timeout:   k.RequestTimeout.Duration,
	}, nil
}

// wholeObjects says what the config already says the stream cannot
// answer for a resource, before anything connects.
func wholeObjects(r historyResource) error {
	if p := r.rc.Payload; p != "" && p != shape.PayloadFull {
		return unanswerable{ExitNotWhole, fmt.Errorf("history: resource %s has payload %q: its events do not carry the whole object (only payload full does)", r.prefix, p)}
	}
	if r.rc.Filter != "" {
		return unanswerable{ExitNotWhole, fmt.Errorf("history: resource %s has a filter: the objects it leaves out are not in the topic, so the state would look smaller than it was", r.prefix)}
	}
	return nil
}

// notCompacted reads the topic's cleanup.policy from the brokers: a
// compacted topic keeps only the newest record per key, so the versions
// between a snapshot and the point may be gone without a trace in the
// offsets a reader sees.
func notCompacted(ctx context.Context, client *kafkago.Client, topic string) error {
	resp, err := client.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: []kafkago.DescribeConfigRequestResource{{
		ResourceType: kafkago.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"cleanup.policy"},
	}}})
	if err != nil {
		return fmt.Errorf("history: reading the cleanup.policy of topic %s: %w", topic, err)
	}
	for _, r := range resp.Resources {
		if r.Error != nil {
			return fmt.Errorf("history: reading the cleanup.policy of topic %s: %w", topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "cleanup.policy" && strings.Contains(e.ConfigValue, "compact") {
				return unanswerable{ExitCompacted, fmt.Errorf("history: %w: topic %s has cleanup.policy %q, which keeps only the newest record of each object, so the versions between a snapshot and the point may be gone; history needs cleanup.policy delete with a retention longer than how far back you look",
					errCompacted, topic, e.ConfigValue)}
			}
		}
	}
	return nil
}

// historyError gives each answer the stream cannot give its exit code.
func historyError(sink string, err error) error {
	for _, c := range []struct {
		sentinel error
		code     int
	}{
		{consumer.ErrNoSnapshot, ExitNoSnapshot},
		{consumer.ErrWatchGapInRange, ExitWatchGap},
		{consumer.ErrReferencePayload, ExitNotWhole},
		{consumer.ErrIncompleteSnapshot, ExitIncomplete},
	} {
		if errors.Is(err, c.sentinel) {
			return unanswerable{c.code, fmt.Errorf("history: %w", err)}
		}
	}
	return fmt.Errorf("history: reading sink %s: %w", sink, err)
}

// printHistory prints the objects h holds that the selectors keep, sorted
// by key: in a table, the event that set each one, as tail prints it; in
// json or yaml, the objects themselves.
func printHistory(p *tailPrinter, h *consumer.History, sel labels.Selector) {
	keys := make([]string, 0, len(h.Last))
	for k := range h.Last {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := h.View.Lookup(k)
		if !ok || !p.filter.keeps("synced", o.Namespace, o.Name) || !sel.Matches(o.Labels()) {
			continue
		}
		switch p.format {
		case "table":
			p.event(h.Last[k], "")
		case "json":
			p.write(p.out, string(o.JSON)+"\n")
		case "yaml":
			b, err := yaml.JSONToYAML(o.JSON)
			if err != nil {
				p.write(p.errOut, fmt.Sprintf("history: %s: %v\n", k, err))
				continue
			}
			p.write(p.out, "---\n"+string(b))
		}
	}
}
