// Command audit-consumer appends every event of a kubewire Kafka topic to a
// JSON lines file: one line per event, tombstone and gap, never rewritten.
// An event that stands for several changes folded together (kubewire's
// buffer was full) has "conflated": "<n>", n the changes folded in, and
// "conflatedFrom", the first version folded. A "gap" line says events were
// lost by the broker (retention deleted them before they were read, or the
// topic was created again). An event line of kubewire's watch.gap event
// has a note naming the range of versions whose changes kubewire may never
// have sent (its watch could not resume); the snapshot that follows gives
// the state after it. kubewire sends it to every partition, so it is
// written once per partition.
//
// It keeps its View's state with its position in <out>.state (as
// docs/consumer.md advises: a View restarted from a position alone would
// lack every object it read before) and goes on from there when restarted;
// a <out>.position of an earlier version is read once, if there is no
// state. Delivery is at least once: after a crash some lines are written
// again; each carries the event id to deduplicate by.
//
//	go run ./examples/audit-consumer --brokers localhost:9092 --topic k8s.core.configmaps --out audit.jsonl
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kubewire/kubewire/consumer"
	"github.com/kubewire/kubewire/encoding"
)

func main() {
	brokers := flag.String("brokers", "localhost:9092", "Kafka bootstrap brokers, comma separated")
	topic := flag.String("topic", "", "the topic kubewire's Kafka sink writes (required)")
	out := flag.String("out", "audit.jsonl", "the JSON lines file to append to")
	flag.Parse()
	if *topic == "" {
		log.Fatal("--topic is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, strings.Split(*brokers, ","), *topic, *out, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// line is one line of the audit file.
type line struct {
	Kind      string `json:"kind"` // event, tombstone, gap or malformed
	Partition string `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key,omitempty"`
	Conflated string `json:"conflated,omitempty"` // how many earlier changes were folded in
	// ConflatedFrom is the resourceVersion of the first change folded in.
	ConflatedFrom string          `json:"conflatedFrom,omitempty"`
	Note          string          `json:"note,omitempty"`
	Event         json.RawMessage `json:"event,omitempty"`
}

// run appends the topic's events to the file at path until ctx ends.
// caughtUp, if set, is called once the file holds what the topic held when
// run started.
func run(ctx context.Context, brokers []string, topic, path string, caughtUp func()) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	statePath := path + ".state"
	if _, err := os.Stat(statePath); err != nil {
		// No state yet: the position an earlier version kept, if any,
		// loaded below into the View's.
		statePath = ""
	}
	start, err := loadPosition(path + ".position")
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var werr error
	enc := json.NewEncoder(f)
	v := consumer.NewView(consumer.Options{OnRead: func(r consumer.Read) {
		l := line{Kind: r.Kind, Partition: r.Position.Partition, Offset: r.Position.Offset, Key: r.Key}
		switch r.Kind {
		case consumer.ReadEvent:
			l.Conflated, _ = r.Event.Extensions()[encoding.ExtConflated].(string)
			l.ConflatedFrom, _ = r.Event.Extensions()[encoding.ExtConflatedFrom].(string)
			if r.Event.Type() == encoding.TypeGap {
				var g encoding.Gap
				if json.Unmarshal(r.Event.Data(), &g) == nil {
					l.Note = fmt.Sprintf("changes with resourceVersion in (%s, %s] may be missing (%s)", g.From, g.To, g.Reason)
					if g.Namespace != "" {
						l.Note = "in namespace " + g.Namespace + ", " + l.Note
					}
				}
			}
			l.Event, _ = r.Event.MarshalJSON()
		case consumer.ReadGap:
			l.Note = fmt.Sprintf("events before offset %d were lost", r.Position.Offset)
		case consumer.ReadMalformed:
			l.Note = r.Err.Error()
		}
		// The View's position passes the message only after this returns,
		// and a line that cannot be written stops the run: nothing is
		// skipped silently.
		if err := enc.Encode(l); err != nil && werr == nil {
			werr = err
			cancel()
		}
	}})
	if statePath != "" {
		if err := v.LoadStateFile(statePath); err != nil {
			return err
		}
		start = v.Position()
	}
	src, err := consumer.NewKafkaSource(v, consumer.KafkaConfig{Brokers: brokers, Topic: topic, Start: start})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	if caughtUp != nil {
		if v.WaitForSync(ctx) == nil {
			caughtUp()
		}
	}
	err = <-done
	if werr != nil {
		// Keep the old position: the next run writes the lost line again.
		return werr
	}
	// Every line before the View's position was written: keep the View
	// and its position for the next run.
	if perr := v.SaveStateFile(path + ".state"); perr != nil {
		return errors.Join(err, perr)
	}
	if perr := os.Remove(path + ".position"); perr != nil && !errors.Is(perr, os.ErrNotExist) {
		return errors.Join(err, perr)
	}
	return err
}

func loadPosition(path string) (consumer.Positions, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p consumer.Positions
	return p, json.Unmarshal(b, &p)
}

func savePosition(path string, p consumer.Positions) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
