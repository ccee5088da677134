package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/internal/base/config"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// runHistoryJetStream is runHistory for a NATS sink in JetStream mode: the
// sink's stream, filtered to each resource's subjects.
func runHistoryJetStream(ctx context.Context, cfg *config.Config, sink string, blk *kwnats.Config, f historyFlags, pt point,
	sel labels.Selector, stdout, stderr io.Writer,
) error {
	n := blk.Defaulted()
	res, err := historyResources(cfg, sink, f.resource, func(rc *config.Resource) string {
		return kwnats.ResourceSubject(n.Subject, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
	})
	if err != nil {
		return err
	}
	nc, js, stream, err := historyStream(ctx, sink, blk)
	if err != nil {
		return err
	}
	defer nc.Close()
	p := &tailPrinter{out: stdout, errOut: stderr, format: f.output, filter: &tailFilter{namespaces: f.namespaces, names: f.names}, done: func() {}, changes: newChangeTracker()}
	if f.output == "table" {
		p.header()
	}
	for _, r := range res {
		h, err := consumer.HistoryAtJetStream(ctx, consumer.JetStreamHistoryConfig{
			JetStream: js, Stream: stream, Subject: r.topic, Resource: r.prefix, RV: pt.rv, At: pt.at,
			Lookback:          r.rc.SnapshotInterval.Duration + f.margin,
			WatchPerNamespace: r.rc.PerNamespaceWatch() && len(r.rc.Namespaces) > 1,
		})
		if err != nil {
			return historyError(sink, err)
		}
		fmt.Fprintf(stderr, "history: %s at resourceVersion %d, from snapshot %s (at %d) in stream %s (%s), %d records read\n", r.prefix, h.RV, h.Snapshot, h.SnapshotRV, stream, r.topic, h.Read)
		printHistory(p, h, sel)
		if p.err != nil {
			return p.err
		}
	}
	return nil
}

// historyStream opens the sink's stream once it is one history can read:
// a core NATS sink keeps nothing, and a stream with a per-subject limit
// has dropped versions.
func historyStream(ctx context.Context, sink string, blk *kwnats.Config) (*natsgo.Conn, jetstream.JetStream, string, error) {
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	nc, js, stream, err := kwnats.OpenStream(octx, blk)
	ocancel()
	if errors.Is(err, kwnats.ErrNoHistory) {
		return nil, nil, "", usageError{fmt.Errorf("--sink %q: %w", sink, err)}
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("history: %w", err)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		nc.Close()
		return nil, nil, "", fmt.Errorf("history: stream %s: %w", stream, err)
	}
	if m := st.CachedInfo().Config.MaxMsgsPerSubject; m > 0 {
		nc.Close()
		return nil, nil, "", unanswerable{ExitCompacted, fmt.Errorf("history: %w: stream %s keeps at most %d message(s) per subject (max_msgs_per_subject), and each object has a subject of its own, so it drops an object's older versions as compaction does: the versions between a snapshot and the point may be gone; history needs a stream without a per-subject limit, whose max_age is longer than how far back you look",
			errCompacted, stream, m)}
	}
	return nc, js, stream, nil
}

// runObjectHistoryJetStream is runObjectHistory for a NATS sink in
// JetStream mode: the object's versions in the sink's stream, filtered to
// its resource's subjects.
func runObjectHistoryJetStream(ctx context.Context, cfg *config.Config, sink string, blk *kwnats.Config, f historyFlags,
	parts []string, since, until point, stdout, stderr io.Writer,
) error {
	n := blk.Defaulted()
	res, err := historyResources(cfg, sink, parts[0], func(rc *config.Resource) string {
		return kwnats.ResourceSubject(n.Subject, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
	})
	if err != nil {
		return fmt.Errorf("object %s: %w", strings.Join(parts, "/"), err)
	}
	r := res[0]
	nc, js, stream, err := historyStream(ctx, sink, blk)
	if err != nil {
		return err
	}
	defer nc.Close()
	key := r.prefix + "/" + strings.Join(parts[1:], "/")
	vs, verr := consumer.VersionsJetStream(ctx, consumer.JetStreamVersionsConfig{
		JetStream: js, Stream: stream, Subject: r.topic, Key: key,
		SinceRV: since.rv, Since: since.at, UntilRV: until.rv, Until: until.at,
		Lookback:          r.rc.SnapshotInterval.Duration + f.margin,
		WatchPerNamespace: r.rc.PerNamespaceWatch() && len(r.rc.Namespaces) > 1,
	})
	return reportVersions(sink, "stream "+stream+" ("+r.topic+")", key, f.output, vs, verr, stdout, stderr)
}
