package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	nc, js, stream, err := kwnats.OpenStream(octx, blk)
	ocancel()
	if errors.Is(err, kwnats.ErrNoHistory) {
		return usageError{fmt.Errorf("--sink %q: %w", sink, err)}
	}
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer nc.Close()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("history: stream %s: %w", stream, err)
	}
	if m := st.CachedInfo().Config.MaxMsgsPerSubject; m > 0 {
		return unanswerable{ExitCompacted, fmt.Errorf("history: %w: stream %s keeps at most %d message(s) per subject (max_msgs_per_subject), and each object has a subject of its own, so it drops an object's older versions as compaction does: the versions between a snapshot and the point may be gone; history needs a stream without a per-subject limit, whose max_age is longer than how far back you look",
			errCompacted, stream, m)}
	}
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
