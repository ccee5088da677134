package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// runObjectHistoryCmd is `history RESOURCE/[NAMESPACE/]NAME`: the flags
// checked, then every version of the object in the range.
func runObjectHistoryCmd(g *globalFlags, f historyFlags, object string, stdout, stderr io.Writer) error {
	switch {
	case f.at != "":
		return usageError{fmt.Errorf("--at and an object (%s) do not go together: --at prints every object at a point, an object every version of it; use --since and --until", object)}
	case f.resource != "" || len(f.namespaces) > 0 || len(f.names) > 0 || f.selector != "":
		return usageError{errors.New("--resource, --namespace, --name and --selector select objects at a point; with an object, its RESOURCE/NAMESPACE/NAME says which")}
	case f.path == "" || f.sink == "":
		return usageError{errors.New("--config and --sink are required")}
	case !slices.Contains([]string{"table", "json", "yaml"}, f.output):
		return usageError{fmt.Errorf("-o %q: must be table, json or yaml", f.output)}
	}
	parts := strings.Split(object, "/")
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return usageError{fmt.Errorf("object %q: want RESOURCE/NAMESPACE/NAME, or RESOURCE/NAME for a cluster-scoped object", object)}
	}
	now := time.Now()
	var since, until point
	var err error
	if f.since != "" {
		if since, err = parsePoint("--since", f.since, now); err != nil {
			return usageError{err}
		}
	}
	if f.until != "" {
		if until, err = parsePoint("--until", f.until, now); err != nil {
			return usageError{err}
		}
	}
	cfg, sc, err := openSink(g, stderr, f.path, f.sink)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch blk := sc.Block.(type) {
	case *kafka.Config:
		return runObjectHistory(ctx, cfg, sc.Name, blk, f, parts, since, until, stdout, stderr)
	case *kwnats.Config:
		return runObjectHistoryJetStream(ctx, cfg, sc.Name, blk, f, parts, since, until, stdout, stderr)
	}
	return usageError{fmt.Errorf("--sink %q: history reads kafka and nats (jetstream) sinks; this is a %s sink", f.sink, sc.Type)}
}

func runObjectHistory(ctx context.Context, cfg *config.Config, sink string, blk *kafka.Config, f historyFlags,
	parts []string, since, until point, stdout, stderr io.Writer,
) error {
	k := blk.Defaulted()
	res, err := historyResources(cfg, sink, parts[0], func(rc *config.Resource) string {
		return kafka.TopicName(k.Topic, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
	})
	if err != nil {
		return fmt.Errorf("object %s: %w", strings.Join(parts, "/"), err)
	}
	r := res[0]
	d, client, err := historyClient(blk)
	if err != nil {
		return err
	}
	if err := notCompacted(ctx, client, r.topic); err != nil {
		return err
	}
	key := r.prefix + "/" + strings.Join(parts[1:], "/")
	vs, verr := consumer.Versions(ctx, consumer.VersionsConfig{
		Brokers: k.Brokers, Topic: r.topic, Dialer: d, Key: key,
		SinceRV: since.rv, Since: since.at, UntilRV: until.rv, Until: until.at,
		Lookback:          r.rc.SnapshotInterval.Duration + f.margin,
		WatchPerNamespace: r.rc.PerNamespaceWatch() && len(r.rc.Namespaces) > 1,
	})
	return reportVersions(sink, "topic "+r.topic, key, f.output, vs, verr, stdout, stderr)
}

// reportVersions prints what a read of an object's versions gave, and
// exits as its error says.
func reportVersions(sink, where, key, format string, vs *consumer.ObjectVersions, verr error, stdout, stderr io.Writer) error {
	if vs == nil {
		return historyError(sink, verr)
	}
	upper := "the end of the " + strings.Fields(where)[0]
	if vs.Until != math.MaxUint64 {
		upper = strconv.FormatUint(vs.Until, 10)
	}
	fmt.Fprintf(stderr, "history: %d version(s) of %s in resourceVersions (%d, %s] in %s, %d records read\n", len(vs.Versions), key, vs.Since, upper, where, vs.Read)
	if err := printVersions(stdout, stderr, format, vs); err != nil {
		return err
	}
	if verr != nil {
		// The versions printed are real; the error says what may be
		// missing among them.
		return historyError(sink, verr)
	}
	return nil
}

// versionLine is a version as -o json and -o yaml print it.
type versionLine struct {
	Time            time.Time       `json:"time"`
	Type            string          `json:"type"`
	ChangedBy       string          `json:"changedby,omitempty"`
	ResourceVersion string          `json:"resourceVersion"`
	Object          json.RawMessage `json:"object,omitempty"`
}

// printVersions prints the versions: in a table as tail prints their
// events, each update with the fields it changed since the version before
// (the one before the range too); in json or yaml, the versions.
func printVersions(stdout, stderr io.Writer, format string, vs *consumer.ObjectVersions) error {
	p := &tailPrinter{out: stdout, errOut: stderr, format: format, filter: &tailFilter{}, done: func() {}, changes: newChangeTracker()}
	if vs.Before != nil {
		p.changes.observe(vs.Before.Event)
	}
	if format == "table" {
		p.header()
	}
	for _, v := range vs.Versions {
		if format == "table" {
			p.event(v.Event, "")
			continue
		}
		l := versionLine{Time: v.Time, Type: v.Type, ChangedBy: v.ChangedBy, ResourceVersion: strconv.FormatUint(v.RV, 10)}
		if json.Valid(v.Event.Data()) {
			l.Object = v.Event.Data()
		}
		b, err := json.Marshal(l)
		if err == nil && format == "yaml" {
			b, err = yaml.JSONToYAML(b)
			b = append([]byte("---\n"), b...)
		} else {
			b = append(b, '\n')
		}
		if err != nil {
			return fmt.Errorf("history: %s at %d: %w", vs.Key, v.RV, err)
		}
		p.write(stdout, string(b))
		if p.err != nil {
			break
		}
	}
	return p.err
}
