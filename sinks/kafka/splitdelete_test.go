package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	// arrange makes the broker do it to the n-th produce request from now
	// on, and returns the log of those requests and a wait for the broker
	// to be done with the one in doubt.
	arrange func(f *fakeKafka, topic string, n int) (*produceLog, func() error)
}

var inDoubtWays = []inDoubt{
	{"The broker answers REQUEST_TIMED_OUT without appending it.", func(f *fakeKafka, _ string, n int) (*produceLog, func() error) {
		answers := make([]int16, n)
		answers[n-1] = 7
		return answerInTurn(f, answers...), func() error { return nil }
	}},
	{"The broker appends it and the connection drops before the answer.", func(f *fakeKafka, topic string, n int) (*produceLog, func() error) {
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
}
