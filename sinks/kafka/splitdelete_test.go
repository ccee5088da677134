package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// contents is what the partitions of topic hold, in order: name/rv for an
// event and tombstone:name for a tombstone.
func contents(t *testing.T, addr, topic string) string {
	t.Helper()
	var got []string
	for _, r := range readTopic(context.Background(), t, addr, topic) {
		if r.value == nil {
			got = append(got, "tombstone:"+string(r.key[strings.LastIndexByte(string(r.key), '/')+1:]))
			continue
		}
		for _, ev := range decodeRecords(t, []rawRecord{r}) {
			got = append(got, label(ev))
		}
	}
	return strings.Join(got, ",")
}

// splitCase is one Write whose records the batch limits split over two
// produce requests, the first acknowledged, the second in doubt.
type splitCase struct {
	name    string
	changes []*informer.Change
	// limit sets the batch limits that put the split where the case wants
	// it, given the Write's events.
	limit func(evs []*encoding.Event) kafka.Batch
	// acked are the events the first Write must report acknowledged: all
	// their records are in the first request.
	acked []int
	// want is what the partition finally holds after the warm-up.
	want string
}

// maxMessages limits a request to n records.
func maxMessages(n int) func([]*encoding.Event) kafka.Batch {
	return func([]*encoding.Event) kafka.Batch { return kafka.Batch{MaxMessages: n} }
}

// bytesUpToTheTombstoneOf limits a request's bytes so that the records of
// evs up to the event of the delete evs[del] fit, and its tombstone does
// not: a size limit that falls between the delete's two records.
func bytesUpToTheTombstoneOf(del int) func([]*encoding.Event) kafka.Batch {
	return func(evs []*encoding.Event) kafka.Batch {
		n := 0
		for _, ev := range evs[:del+1] {
			e, _ := kafka.RecordSizes(ev)
			n += e
		}
		return kafka.Batch{MaxBytes: n}
	}
}

var splitCases = []splitCase{
	{
		name:    "The request in doubt holds the tombstone of a delete whose event the first request got acknowledged, one record a request.",
		changes: []*informer.Change{sinktest.Change(informer.OpDeleted, "team-a", "a", 2)},
		limit:   maxMessages(1),
		want:    "a/2,tombstone:a",
	},
	{
		name:    "The request in doubt holds the tombstone of a delete whose event the first request got acknowledged, under a size limit between the two.",
		changes: []*informer.Change{sinktest.Change(informer.OpDeleted, "team-a", "a", 2)},
		limit:   bytesUpToTheTombstoneOf(0),
		want:    "a/2,tombstone:a",
	},
	{
		name: "The request in doubt holds an ordinary event after a delete the first request got acknowledged whole.",
		changes: []*informer.Change{
			sinktest.Change(informer.OpDeleted, "team-a", "a", 2),
			sinktest.Change(informer.OpUpdated, "team-a", "c", 3),
		},
		limit: maxMessages(2),
		acked: []int{0},
		want:  "a/2,tombstone:a,c/3",
	},
	{
		name: "The request in doubt spans the tombstone of a split delete and an ordinary event, two records a request.",
		changes: []*informer.Change{
			sinktest.Change(informer.OpUpdated, "team-a", "b", 2),
			sinktest.Change(informer.OpDeleted, "team-a", "a", 3),
			sinktest.Change(informer.OpUpdated, "team-a", "c", 4),
		},
		limit: maxMessages(2),
		acked: []int{0},
		want:  "b/2,a/3,tombstone:a,c/4",
	},
	{
		name: "The request in doubt spans the tombstone of a split delete and an ordinary event, under a size limit between the delete's records.",
		changes: []*informer.Change{
			sinktest.Change(informer.OpUpdated, "team-a", "b", 2),
			sinktest.Change(informer.OpDeleted, "team-a", "a", 3),
			sinktest.Change(informer.OpUpdated, "team-a", "c", 4),
		},
		limit: bytesUpToTheTombstoneOf(1),
		acked: []int{0},
		want:  "b/2,a/3,tombstone:a,c/4",
	},
}

// inDoubt is a way for the broker to leave the sink's second produce
// request of a Write in doubt.
type inDoubt struct {
	name string
	// appends: the broker appends the request in doubt.
	appends bool
	// arrange makes the broker do it to the n-th produce request from now
	// on, and returns the log of those requests and a wait for the broker
	// to be done with the one in doubt.
	arrange func(f *fakeKafka, topic string, n int) (*produceLog, func() error)
}

var inDoubtWays = []inDoubt{
	{"The broker answers REQUEST_TIMED_OUT without appending it.", false, func(f *fakeKafka, _ string, n int) (*produceLog, func() error) {
		answers := make([]int16, n)
		answers[n-1] = 7
		return answerInTurn(f, answers...), func() error { return nil }
	}},
	{"The broker appends it and the connection drops before the answer.", true, func(f *fakeKafka, topic string, n int) (*produceLog, func() error) {
		return appendThenAnswerAt(f, topic, n, func(kmsg.Request) (kmsg.Response, error) {
			return nil, errors.New("the connection drops after the append")
		})
	}},
}

// A Write whose records go out in two produce requests: the broker
// acknowledges the first and leaves the second in doubt. The dispatcher
// writes the failed events again. No record the first request got
// acknowledged goes out again as a new record, the request in doubt goes
// out again byte for byte (same producer id, epoch and sequence), and the
// partition ends with each record once, in order.
func TestARecordAcknowledgedBeforeARequestInDoubtIsNeverSentAgainAndTheRequestInDoubtIsResentUnchanged(t *testing.T) {
	for _, c := range splitCases {
		t.Run(c.name, func(t *testing.T) {
			for _, way := range inDoubtWays {
				t.Run(way.name, func(t *testing.T) { splitWriteInDoubt(t, c, way) })
			}
		})
	}
}

func splitWriteInDoubt(t *testing.T, c splitCase, way inDoubt) {
	evs := make([]*encoding.Event, len(c.changes))
	for i, ch := range c.changes {
		evs[i] = mustEvent(t, ch)
	}
	limit := c.limit(evs)
	limit.Linger = config.NewDuration(0)
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), func(k *kafka.Config) { k.Batch = &limit })
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic
	topic := widgetTopic(prefix)

	sent, done := way.arrange(f, topic, 2)
	dups := possibleDups()
	err := s.Write(context.Background(), evs)
	var be *sinks.BatchError
	if !errors.As(err, &be) || be.Len() != len(evs) {
		t.Fatalf("Write = %v; want a sinks.BatchError over its %d events", err, len(evs))
	}
	var failed []*encoding.Event
	for i, ev := range evs {
		wantAcked := false
		for _, a := range c.acked {
			wantAcked = wantAcked || a == i
		}
		if e := be.Err(i); (e == nil) != wantAcked {
			t.Errorf("event %d (%s) reported %v; acknowledged should be %v", i, ev.ID(), e, wantAcked)
		}
		if be.Err(i) != nil {
			failed = append(failed, ev)
		}
	}
	if err := done(); err != nil {
		t.Fatalf("the broker did not get to the request in doubt: %v", err)
	}
	// The dispatcher's retry: the failed events, the very same ones.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, failed); err != nil {
		t.Fatalf("the retry of the failed events: %v", err)
	}
	f.c.DropControl()

	if got, want := contents(t, f.addr(), topic), "warm-up/1,"+c.want; got != want {
		t.Errorf("the partition holds %s, want %s", got, want)
	}
	copies := sent.all()
	if len(copies) < 3 || !bytes.Equal(copies[1], copies[2]) {
		t.Errorf("the request after the one in doubt is not that request again byte for byte (%d requests)", len(copies))
	}
	if d := possibleDups() - dups; d != 0 {
		t.Errorf("kubewire_kafka_possible_duplicates_total grew by %v, want 0: nothing was sent again as a new record", d)
	}
}

// dupReasons are the reasons kubewire_kafka_possible_duplicates_total
// knows.
var dupReasons = []string{"refused_after_doubt", "fenced", "sequence_error", "not_idempotent", "closed"}

// possibleDups is kubewire_kafka_possible_duplicates_total of the tests'
// sink, over every reason.
func possibleDups() float64 {
	n := 0.0
	for _, r := range dupReasons {
		n += testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", r))
	}
	return n
}

// Without the idempotent producer nothing tells the broker that a retry
// repeats a request in doubt. The retry of a delete whose event was
// acknowledged still leaves the event alone; its tombstone, in the
// request in doubt, goes out again as a new record, and is counted as a
// possible duplicate. Here the broker appended it before the connection
// dropped, so it is in the partition twice, next to itself.
func TestWithoutIdempotenceARequestInDoubtIsCountedAsAPossibleDuplicateAndAnAcknowledgedEventIsNotRepeated(t *testing.T) {
	for _, way := range inDoubtWays {
		t.Run(way.name, func(t *testing.T) {
			f := startFake(t)
			off := false
			s, prefix, _ := newLoggedSink(t, f.addr(), func(k *kafka.Config) {
				k.Batch = &kafka.Batch{MaxMessages: 1, Linger: config.NewDuration(0)}
				k.Idempotent = &off
			})
			connect(t, s)
			write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
			topic := widgetTopic(prefix)

			_, done := way.arrange(f, topic, 2)
			before := testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", "not_idempotent"))
			del := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpDeleted, "team-a", "a", 2))}
			if err := s.Write(context.Background(), del); err == nil {
				t.Fatal("a Write whose tombstone's request is in doubt reported success")
			}
			if err := done(); err != nil {
				t.Fatalf("the broker did not get to the request in doubt: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Write(ctx, del); err != nil {
				t.Fatalf("the retry of the delete: %v", err)
			}
			f.c.DropControl()

			want := "warm-up/1,a/2,tombstone:a"
			if way.appends {
				want += ",tombstone:a"
			}
			if got := contents(t, f.addr(), topic); got != want {
				t.Errorf("the partition holds %s, want %s", got, want)
			}
			if d := testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", "not_idempotent")) - before; d != 1 {
				t.Errorf("kubewire_kafka_possible_duplicates_total{reason=\"not_idempotent\"} grew by %v, want 1: the tombstone", d)
			}
		})
	}
}

// A batch in doubt goes out again unchanged until the broker says what
// became of it. If it then cannot (refused for good, its sequence or its
// producer refused), its records go out again as new records, under a new
// epoch or producer id, and an earlier copy may be in the log: each is
// counted as a possible duplicate. A batch refused before any copy could
// be appended is not.
func TestABatchInDoubtThatCannotGoOutAgainUnchangedIsCountedAsAPossibleDuplicate(t *testing.T) {
	for _, c := range []struct {
		name   string
		codes  []int16
		reason string // "" for none
	}{
		{"REQUEST_TIMED_OUT, then INVALID_RECORD.", []int16{7, 87}, "refused_after_doubt"},
		{"REQUEST_TIMED_OUT, then OUT_OF_ORDER_SEQUENCE_NUMBER.", []int16{7, 45}, "sequence_error"},
		{"REQUEST_TIMED_OUT, then UNKNOWN_PRODUCER_ID.", []int16{7, 59}, "sequence_error"},
		{"REQUEST_TIMED_OUT, then INVALID_PRODUCER_EPOCH.", []int16{7, 47}, "fenced"},
		{"NOT_ENOUGH_REPLICAS, then INVALID_RECORD: never in doubt.", []int16{19, 87}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFake(t)
			s, prefix, _ := newLoggedSink(t, f.addr(), nil)
			connect(t, s)
			write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
			topic := widgetTopic(prefix)

			answerInTurn(f, c.codes...)
			dups := possibleDups()
			reason := 0.0
			if c.reason != "" {
				reason = testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", c.reason))
			}
			a2 := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
			for range c.codes {
				if err := s.Write(context.Background(), a2); err == nil {
					t.Fatal("a Write the broker did not take reported success")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Write(ctx, a2); err != nil {
				t.Fatalf("the last retry of a/2: %v", err)
			}
			want := 0.0
			if c.reason != "" {
				want = 1
				if d := testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", c.reason)) - reason; d != 1 {
					t.Errorf("kubewire_kafka_possible_duplicates_total{reason=%q} grew by %v, want 1", c.reason, d)
				}
			}
			if d := possibleDups() - dups; d != want {
				t.Errorf("kubewire_kafka_possible_duplicates_total grew by %v over every reason, want %v", d, want)
			}
			if got := contents(t, f.addr(), topic); got != "warm-up/1,a/2" {
				t.Errorf("the partition holds %s, want warm-up/1,a/2", got)
			}
		})
	}
}

// The sink closes while a delete is split: its event acknowledged, its
// tombstone in a request in doubt. Both are written again by the next
// process, so both are counted as possible duplicates.
func TestClosingWithADeleteSplitOverAnAcknowledgedRequestAndOneInDoubtCountsBothRecords(t *testing.T) {
	f := startFake(t)
	s, _, _ := newLoggedSink(t, f.addr(), func(k *kafka.Config) {
		k.Batch = &kafka.Batch{MaxMessages: 1, Linger: config.NewDuration(0)}
	})
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))

	answerInTurn(f, 0, 7)
	before := testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", "closed"))
	del := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpDeleted, "team-a", "a", 2))}
	if err := s.Write(context.Background(), del); err == nil {
		t.Fatal("a Write whose tombstone's request is in doubt reported success")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := testutil.ToFloat64(kafka.PossibleDups.WithLabelValues("kafka-test", "closed")) - before; d != 2 {
		t.Errorf("kubewire_kafka_possible_duplicates_total{reason=\"closed\"} grew by %v, want 2: the event and the tombstone", d)
	}
}
