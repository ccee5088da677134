package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks/kafka"
	kwnats "github.com/kubewire/kubewire/sinks/nats"
)

// tailTypes are the values --type accepts: the short event types, the
// snapshot markers together, and what tail shows besides events.
var tailTypes = []string{"added", "updated", "deleted", "synced", "snapshot", "snapshot.started", "snapshot.completed", "tombstone", "gap", "malformed"}

type tailFlags struct {
	path, sink, output       string
	fromBeginning, noFollow  bool
	count                    int
	namespaces, names, types []string
}

func newTail(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	var f tailFlags
	cmd := &cobra.Command{
		Use:   "tail --config FILE --sink NAME",
		Short: "Print the events of a sink's topic or stream as they arrive, like kcat or nats sub",
		Long: `Print the events of a kafka or jetstream sink as they arrive, every one of them
(duplicates included), in the order each partition holds them.

By default tail prints only the events written after it started, and follows
the stream until interrupted. --from-beginning reads everything the topic or
stream keeps; --no-follow stops once tail has read what was there when it
started; --count stops after that many events.

-o table prints one line per event: time, type, object (the partition key),
resourceVersion, who changed it (changedby), on Kafka the partition, the
event id, and a note: for an update, the first changed fields as
"path: old → new" (once tail has seen the object before); conflated,
finalstateunknown, incomplete; a watch gap's range. A snapshot marker or
watch gap, written to every partition, is shown once. Kafka tombstones and
gaps in the stream are lines of their own.
-o json prints each event as one structured-mode CloudEvent per line, and
-o yaml as YAML documents; with those, tombstones and gaps go to stderr, so
that stdout holds only CloudEvents.`,
		Example: `  # new events of the kafka sink "events", as a table, until Ctrl-C
  kubewire tail --config kubewire.yaml --sink events

  # everything the stream keeps about one namespace's deletes, then stop
  kubewire tail --config kubewire.yaml --sink jetstream --from-beginning --no-follow \
    --namespace team-a --type deleted

  # the next 10 ConfigMap events as CloudEvents JSON, one per line, for jq
  kubewire tail --config kubewire.yaml --sink events -o json --count 10 | jq .subject`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.check()
			if err != nil {
				return err
			}
			cfg, sc, err := openSink(g, stderr, f.path, f.sink)
			if err != nil {
				return err
			}
			if n, ok := sc.Block.(*kwnats.Config); ok && n.Mode != kwnats.ModeJetStream {
				return usageError{fmt.Errorf("--sink %q: a core NATS sink keeps nothing to read back; name a jetstream sink, or use nats sub", f.sink)}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runTail(ctx, cfg, sc, f, flt, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.path, "config", "", "path to the config file (required)")
	fl.StringVar(&f.sink, "sink", "", "name of the kafka or jetstream sink to read (required)")
	fl.BoolVar(&f.fromBeginning, "from-beginning", false, "read everything the topic or stream keeps, not only new events")
	fl.BoolVar(&f.noFollow, "no-follow", false, "stop once what the topic or stream held at start was read")
	fl.IntVar(&f.count, "count", 0, "stop after printing this many events (0: no limit)")
	fl.StringSliceVar(&f.namespaces, "namespace", nil, "print only events of these namespaces (repeatable, or a comma list)")
	fl.StringSliceVar(&f.names, "name", nil, "print only events of objects with these names (repeatable, or a comma list)")
	fl.StringSliceVar(&f.types, "type", nil, "print only these types: "+strings.Join(tailTypes, ", ")+" (repeatable, or a comma list)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// check validates the flags and returns the filter they make.
func (f *tailFlags) check() (*tailFilter, error) {
	switch {
	case f.path == "" || f.sink == "":
		return nil, usageError{errors.New("--config and --sink are required")}
	case f.count < 0:
		return nil, usageError{fmt.Errorf("--count %d: must be 0 (no limit) or more", f.count)}
	case !slices.Contains([]string{"table", "json", "yaml"}, f.output):
		return nil, usageError{fmt.Errorf("-o %q: must be table, json or yaml", f.output)}
	}
	for _, t := range f.types {
		if !slices.Contains(tailTypes, t) {
			return nil, usageError{fmt.Errorf("--type %q: must be one of %s", t, strings.Join(tailTypes, ", "))}
		}
	}
	return &tailFilter{namespaces: f.namespaces, names: f.names, types: f.types}, nil
}

// tailFilter keeps what --namespace, --name and --type ask for; an empty
// list keeps everything.
type tailFilter struct{ namespaces, names, types []string }

func (t *tailFilter) keeps(typ, namespace, name string) bool {
	in := func(l []string, v string) bool { return len(l) == 0 || slices.Contains(l, v) }
	typeOK := in(t.types, typ) || strings.HasPrefix(typ, "snapshot.") && slices.Contains(t.types, "snapshot") ||
		typ == "watch.gap" && slices.Contains(t.types, "gap")
	if typ == "gap" || typ == "watch.gap" || typ == "malformed" {
		// They belong to no object: only --type hides them.
		return typeOK
	}
	return typeOK && in(t.namespaces, namespace) && in(t.names, name)
}

// shortType is an event type without kubewire's prefixes: "added",
// "snapshot.started".
func shortType(t string) string {
	return strings.TrimPrefix(strings.TrimPrefix(t, encoding.TypePrefix), "object.")
}

// keyParts splits a partition key, <resource>/<namespace>/<name> or
// <resource>/<name>, for filtering tombstones, which carry only their key.
func keyParts(key string) (namespace, name string) {
	p := strings.Split(key, "/")
	switch len(p) {
	case 3:
		return p[1], p[2]
	case 2:
		return "", p[1]
	}
	return "", ""
}

// runTail reads the sink into a View whose OnRead prints what the filter
// keeps, until ctx ends, --count events were printed, or (--no-follow) the
// sources caught up.
func runTail(ctx context.Context, cfg *config.Config, sc *config.Sink, f tailFlags, flt *tailFilter, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, isKafka := sc.Block.(*kafka.Config)
	p := &tailPrinter{out: stdout, errOut: stderr, format: f.output, filter: flt, limit: f.count, done: cancel, partitions: isKafka}
	var v *consumer.View
	v = consumer.NewView(consumer.Options{OnRead: func(r consumer.Read) {
		// With --no-follow, what a source reads after every source caught
		// up is past the end tail was asked for.
		if f.noFollow && v.HasSynced() {
			return
		}
		p.print(r)
	}})
	// Before tail has caught up, a failure to read is an answer (a wrong
	// address, a missing topic) and ends it; after, the sources ride out
	// a broker restart, and tail says so and goes on.
	errs := make(chan error, 8)
	onError := func(err error, retryIn time.Duration) {
		if !v.HasSynced() {
			select {
			case errs <- err:
			default:
			}
			cancel()
			return
		}
		fmt.Fprintf(stderr, "tail: reading sink %s: %v; retrying in %s\n", sc.Name, err, retryIn.Round(time.Millisecond))
	}
	runs, what, closeFn, err := tailSources(ctx, cfg, sc, v, !f.fromBeginning, onError)
	if err != nil {
		return fmt.Errorf("tail: reading sink %s: %w", sc.Name, err)
	}
	defer closeFn()

	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				select {
				case errs <- err:
				default:
				}
				cancel()
			}
		})
	}
	if err := v.WaitForSync(ctx); err == nil {
		// Every source has read what was there: the connection works, and
		// an empty stream still gets its header.
		p.header()
		if f.noFollow {
			cancel()
		} else {
			fmt.Fprintf(stderr, "tail: caught up with %s; following (Ctrl-C to stop)\n", what)
		}
	}
	<-ctx.Done()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("tail: reading sink %s: %w", sc.Name, err)
	}
	return p.err
}

// tailSources builds a source per Kafka topic of the sink (one topic per
// resource routed to it), or one for the sink's JetStream stream. what
// names what is read, for people.
func tailSources(ctx context.Context, cfg *config.Config, sc *config.Sink, v *consumer.View, fromEnd bool,
	onError func(error, time.Duration),
) (runs []func(context.Context) error, what string, closeFn func(), err error) {
	switch blk := sc.Block.(type) {
	case *kafka.Config:
		d, err := kafka.Dialer(blk)
		if err != nil {
			return nil, "", nil, err
		}
		k := blk.Defaulted()
		var topics []string
		for _, rc := range cfg.Resources {
			t := kafka.TopicName(k.Topic, cfg.Cluster, rc.Group, rc.Version, rc.Resource)
			if slices.Contains(rc.Sinks, sc.Name) && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
		for _, t := range topics {
			s, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: k.Brokers, Topic: t, Dialer: d, FromEnd: fromEnd, OnError: onError})
			if err != nil {
				return nil, "", nil, err
			}
			runs = append(runs, s.Run)
		}
		return runs, "topic " + strings.Join(topics, ", "), func() {}, nil
	case *kwnats.Config:
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		defer ocancel()
		nc, js, stream, err := kwnats.OpenStream(octx, blk)
		if err != nil {
			return nil, "", nil, err
		}
		s, err := consumer.NewJetStreamSource(v, consumer.JetStreamConfig{JetStream: js, Stream: stream, FromEnd: fromEnd, OnError: onError})
		if err != nil {
			nc.Close()
			return nil, "", nil, err
		}
		return []func(context.Context) error{s.Run}, "stream " + stream, nc.Close, nil
	}
	return nil, "", nil, fmt.Errorf("tail: a %s sink keeps nothing to read back", sc.Type)
}

// tailPrinter writes what a View's sources read, as the format says. Its
// print is called with the View's apply lock held, one read at a time.
type tailPrinter struct {
	out, errOut io.Writer
	format      string
	filter      *tailFilter
	limit       int
	printed     int
	done        func()
	err         error
	// partitions adds the PARTITION column (Kafka).
	partitions bool
	// changes remembers objects, so that an update row names what changed.
	changes    *changeTracker
	headerOnce sync.Once
	// markers are the ids of snapshot markers and gap events already
	// printed: kubewire writes each to every partition of a topic, and a
	// person needs to see it once.
	markers map[string]bool
}

// header prints the table's header once, before the first row or when
// tail caught up, whichever is first: so only after the broker answered.
func (p *tailPrinter) header() {
	p.headerOnce.Do(func() {
		if p.format == "table" {
			p.writeRow("TIME", "TYPE", "OBJECT", "RV", "BY", "PARTITION", "ID", "NOTE")
		}
	})
}

// row prints a table row; cols are TIME, TYPE, OBJECT, RV, BY, PARTITION,
// ID, NOTE, and PARTITION is left out unless the sink has partitions.
func (p *tailPrinter) row(cols ...string) {
	p.header()
	p.writeRow(cols...)
}

func (p *tailPrinter) writeRow(cols ...string) {
	widths := []int{24, 18, 40, 8, 20, 9, 44, 0}
	var b strings.Builder
	for i, c := range cols {
		if i == 5 && !p.partitions {
			continue
		}
		if c == "" && i < len(cols)-1 {
			c = "-"
		}
		if b.Len() > 0 {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%-*s", widths[i], c)
	}
	p.write(p.out, strings.TrimRight(b.String(), " ")+"\n")
}

func (p *tailPrinter) write(w io.Writer, s string) {
	if _, err := io.WriteString(w, s); err != nil && p.err == nil {
		// A closed pipe (| head) ends tail.
		p.err = err
		p.done()
	}
}

func (p *tailPrinter) print(r consumer.Read) {
	if p.err != nil || (p.limit > 0 && p.printed >= p.limit) {
		return
	}
	switch r.Kind {
	case consumer.ReadEvent:
		p.event(r.Event, r.Position.Partition)
	case consumer.ReadTombstone:
		ns, name := keyParts(r.Key)
		if p.filter.keeps("tombstone", ns, name) {
			p.other("tombstone", r.Key, r.Position.Partition, fmt.Sprintf("at %s@%d", r.Position.Partition, r.Position.Offset))
		}
	case consumer.ReadGap:
		if p.filter.keeps("gap", "", "") {
			p.other("gap", r.Position.Partition, r.Position.Partition, fmt.Sprintf("events lost before offset %d", r.Position.Offset))
		}
	case consumer.ReadMalformed:
		if p.filter.keeps("malformed", "", "") {
			p.other("malformed", r.Position.Partition, r.Position.Partition, fmt.Sprintf("at offset %d: %v", r.Position.Offset, r.Err))
		}
	}
}

// other prints what is not a CloudEvent: a table row, or a line on stderr
// so that json and yaml output hold only events.
func (p *tailPrinter) other(kind, key, partition, note string) {
	if p.format == "table" {
		p.row("-", kind, key, "-", "-", partitionNumber(partition), "-", note)
		return
	}
	p.write(p.errOut, fmt.Sprintf("tail: %s %s %s\n", kind, key, note))
}

// partitionNumber is the partition of a Kafka position ("topic/3" → "3").
func partitionNumber(partition string) string {
	if i := strings.LastIndexByte(partition, '/'); i >= 0 {
		return partition[i+1:]
	}
	return partition
}

func (p *tailPrinter) event(ev *event.Event, partition string) {
	ext := func(name string) string { v, _ := ev.Extensions()[name].(string); return v }
	typ := shortType(ev.Type())
	if !p.filter.keeps(typ, ext(encoding.ExtNamespace), ext(encoding.ExtName)) {
		return
	}
	if typ != "added" && typ != "updated" && typ != "deleted" && typ != "synced" {
		// A marker or gap is written to every partition; show it once.
		if p.markers == nil {
			p.markers = map[string]bool{}
		}
		if p.markers[ev.ID()] {
			return
		}
		p.markers[ev.ID()] = true
	}
	switch p.format {
	case "table":
		if p.changes == nil {
			p.changes = newChangeTracker()
		}
		notes := p.changes.observe(ev)
		for _, n := range []string{encoding.ExtConflated, encoding.ExtFinalStateUnknown, encoding.ExtIncomplete} {
			if _, ok := ev.Extensions()[n]; ok {
				notes = append(notes, n)
			}
		}
		if typ == "watch.gap" {
			notes = append(notes, gapNote(ev))
		}
		t := "-"
		if !ev.Time().IsZero() {
			t = ev.Time().UTC().Format("2006-01-02T15:04:05.000Z")
		}
		p.row(t, typ, ext(encoding.ExtPartitionKey), ext(encoding.ExtResourceVersion), ext(encoding.ExtChangedBy),
			partitionNumber(partition), ev.ID(), strings.Join(notes, ", "))
	case "json", "yaml":
		b, err := ev.MarshalJSON()
		if err == nil && p.format == "yaml" {
			b, err = yaml.JSONToYAML(b)
			b = append([]byte("---\n"), b...)
		} else {
			b = append(b, '\n')
		}
		if err != nil {
			p.write(p.errOut, fmt.Sprintf("tail: event %s: %v\n", ev.ID(), err))
			return
		}
		p.write(p.out, string(b))
	}
	p.printed++
	if p.limit > 0 && p.printed >= p.limit {
		p.done()
	}
}

// gapNote tells a watch.gap event's range: the resourceVersions whose
// changes may be missing, and why.
func gapNote(ev *event.Event) string {
	var g encoding.Gap
	if err := json.Unmarshal(ev.Data(), &g); err != nil {
		return "gap: unreadable data: " + err.Error()
	}
	from := g.From
	if from == "" {
		from = "?"
	}
	note := fmt.Sprintf("changes in (%s, %s] may be missing (%s)", from, g.To, g.Reason)
	if g.Namespace != "" {
		note += " in namespace " + g.Namespace
	}
	return note
}
