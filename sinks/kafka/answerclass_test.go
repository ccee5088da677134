package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// How the sink treats each class of the broker's answers to a produce
// request (see produceClass in idempotent.go). Each test plays what the
// dispatcher does: a Write, a newer Write, the retry of a failed one; and
// checks what a consumer finally reads from the partition.

// answerCase is one produce error code and what the broker is answering
// with it.
type answerCase struct {
	name string
	code int16
}

// inDoubtAnswers are answers that leave the batch possibly in the log.
var inDoubtAnswers = []answerCase{
	{"NOT_LEADER_OR_FOLLOWER", 6},
	{"LEADER_NOT_AVAILABLE", 5},
	{"NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20},
	{"REQUEST_TIMED_OUT", 7},
	{"KAFKA_STORAGE_ERROR", 56},
	{"UNKNOWN_SERVER_ERROR", -1},
	{"an error code kubewire does not know", 4242},
}

// retriableAnswers are answers a broker gives before appending, for a
// batch that may succeed as it is later.
var retriableAnswers = []answerCase{
	{"NOT_ENOUGH_REPLICAS", 19},
	{"UNKNOWN_TOPIC_OR_PARTITION", 3},
}

// refusedAnswers are answers a broker gives before appending, for a batch
// that can never succeed as it is.
var refusedAnswers = []answerCase{
	{"CORRUPT_MESSAGE", 2},
	{"INVALID_RECORD", 87},
	{"INVALID_TIMESTAMP", 32},
	{"INVALID_REQUIRED_ACKS", 21},
	{"TOPIC_AUTHORIZATION_FAILED", 29},
	{"CLUSTER_AUTHORIZATION_FAILED", 31},
}

// tooLargeAnswers are the refusals for good that send the records again
// one by one.
var tooLargeAnswers = []answerCase{
	{"MESSAGE_TOO_LARGE", 10},
	{"RECORD_LIST_TOO_LARGE", 18},
}

// produceLog records the record batch of every produce request the fake
// broker gets from the sink, in order.
type produceLog struct {
	mu     sync.Mutex
	copies [][]byte
}

func (l *produceLog) add(req kmsg.Request) int {
	raw := slices.Clone(req.(*kmsg.ProduceRequest).Topics[0].Partitions[0].Records)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.copies = append(l.copies, raw)
	return len(l.copies)
}

func (l *produceLog) all() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.copies)
}

// answerInTurn makes the fake broker answer the sink's n-th produce
// request (from 1) with answers[n-1] without appending anything, where
// that is not 0, and handle every other one.
func answerInTurn(f *fakeKafka, answers ...int16) *produceLog {
	l := &produceLog{}
	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		n := l.add(req)
		if n <= len(answers) && answers[n-1] != 0 {
			return produceAnswer(req, answers[n-1]), nil, true
		}
		return nil, nil, false
	})
	return l
}

// appendThenAnswer makes the fake broker append the sink's next produce
// request and only then answer it with answer's response or error (an
// error closes the connection): a leader that loses its leadership while
// it waits for its followers does that with NOT_LEADER_OR_FOLLOWER. kfake
// has no hook between its append and its answer, so the control sends a
// copy of the request to the broker on a connection of its own, waits for
// that copy's answer, and answers the sink's request itself. appended
// waits for the copy's outcome. Every later request is handled normally.
func appendThenAnswer(f *fakeKafka, topic string, answer func(kmsg.Request) (kmsg.Response, error)) (l *produceLog, appended func() error) {
	return appendThenAnswerAt(f, topic, 1, answer)
}

// appendThenAnswerAt is appendThenAnswer for the sink's n-th produce
// request (from 1): the ones before it are handled normally too.
func appendThenAnswerAt(f *fakeKafka, topic string, n int, answer func(kmsg.Request) (kmsg.Response, error)) (l *produceLog, appended func() error) {
	l = &produceLog{}
	done := make(chan error, 1)
	var forwarding atomic.Bool
	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		if forwarding.Load() {
			return nil, nil, false // the copy: the broker appends it
		}
		if l.add(req) != n {
			return nil, nil, false
		}
		forwarding.Store(true)
		pr := req.(*kmsg.ProduceRequest)
		f.c.SleepControl(func() { done <- forwardProduce(f.addr(), topic, pr) })
		forwarding.Store(false)
		res, err := answer(req)
		return res, err, true
	})
	return l, func() error {
		select {
		case err := <-done:
			done <- err
			return err
		case <-time.After(20 * time.Second):
			return errors.New("the copy of the produce request got no answer within 20s")
		}
	}
}

// forwardProduce sends pr's record batch, as it is, to the broker at addr.
func forwardProduce(addr, topic string, pr *kmsg.ProduceRequest) error {
	tr := &kafkago.Transport{DialTimeout: 2 * time.Second}
	defer tr.CloseIdleConnections()
	c := &kafkago.Client{Addr: kafkago.TCP(addr), Timeout: 10 * time.Second, Transport: tr}
	p := pr.Topics[0].Partitions[0]
	raw := binary.BigEndian.AppendUint32(nil, uint32(len(p.Records)))
	raw = append(raw, p.Records...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.RawProduce(ctx, &kafkago.RawProduceRequest{
		Topic:        topic,
		Partition:    int(p.Partition),
		RequiredAcks: kafkago.RequiredAcks(pr.Acks),
		RawRecords:   protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		return fmt.Errorf("append the copy: %w", err)
	}
	return nil
}

// writes plays the dispatcher's Writes of single events and remembers
// which ones reported success. A retry writes the very event of the
// failed Write again, as the dispatcher does.
type writes struct {
	t      *testing.T
	s      sinks.Sink
	events map[string]*encoding.Event
	ok     []string
}

func (w *writes) write(name string, rv int) error {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	label := fmt.Sprintf("%s/%d", name, rv)
	ev := w.events[label]
	if ev == nil {
		ev = mustEvent(w.t, sinktest.Change(informer.OpUpdated, "team-a", name, rv))
		if w.events == nil {
			w.events = map[string]*encoding.Event{}
		}
		w.events[label] = ev
	}
	err := w.s.Write(ctx, []*encoding.Event{ev})
	if err == nil {
		w.ok = append(w.ok, label)
	}
	return err
}

// check fails the test unless the partition holds want, in that order, and
// every Write that reported success has its record in it.
func (w *writes) check(f *fakeKafka, topic, want string) {
	w.t.Helper()
	got := names(w.t, f.addr(), topic)
	if got != want {
		w.t.Errorf("the partition holds %s, want %s", got, want)
	}
	held := strings.Split(got, ",")
	for _, ok := range w.ok {
		if !slices.Contains(held, ok) {
			w.t.Errorf("a Write of %s reported success, but the partition does not hold it (%s): a silent loss", ok, got)
		}
	}
}

// carries reports whether a produce request's batch carries the event of
// the object name.
func carries(raw []byte, name string) bool { return bytes.Contains(raw, []byte(`"name":"`+name+`"`)) }

// The leader appends a/2 and then answers with an error, or the connection
// drops before its answer (with acks=all a leader that loses its
// leadership while waiting for its followers answers
// NOT_LEADER_OR_FOLLOWER after the append). a/2 is in doubt: the next
// request resends it byte for byte, the broker takes the copy for the
// duplicate it is, and b/3 follows under the next sequence. Were a/2
// dropped, b/3 would take a/2's sequence, the broker would drop b/3 as a
// duplicate of a/2 and answer success, and the retry of a/2 would append
// a/2 a second time.
func TestABatchTheLeaderAppendedBeforeItsErrorIsInTheLogOnceAndTheNextChangeIsNotLost(t *testing.T) {
	cases := make([]answerCase, 0, len(inDoubtAnswers)+1)
	cases = append(cases, inDoubtAnswers...)
	cases = append(cases, answerCase{"no answer: the connection drops", 0})
	for _, c := range cases {
		t.Run("After the append, "+c.name+".", func(t *testing.T) {
			f := startFake(t)
			s, prefix, _ := newLoggedSink(t, f.addr(), nil)
			connect(t, s)
			w := &writes{t: t, s: s}
			if err := w.write("warm-up", 1); err != nil { // creates the topic
				t.Fatalf("Write: %v", err)
			}
			topic := widgetTopic(prefix)
			id, epoch, seq, _ := kafka.ProducerState(s, topic, 0)

			sent, appended := appendThenAnswer(f, topic, func(req kmsg.Request) (kmsg.Response, error) {
				if c.code == 0 {
					return nil, errors.New("the connection drops after the append")
				}
				return produceAnswer(req, c.code), nil
			})
			resends := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test"))
			if err := w.write("a", 2); err == nil {
				t.Fatalf("a Write answered with %s reported success", c.name)
			}
			if err := appended(); err != nil {
				t.Fatalf("the test could not append a/2 behind the sink's back: %v", err)
			}
			if err := w.write("b", 3); err != nil {
				t.Errorf("the Write of b/3 failed: %v", err)
			}
			if err := w.write("a", 2); err != nil { // the dispatcher's retry
				t.Errorf("the retry of a/2 failed: %v", err)
			}
			w.check(f, topic, "warm-up/1,a/2,b/3")

			copies := sent.all()
			if len(copies) < 2 || !bytes.Equal(copies[0], copies[1]) {
				t.Errorf("the request after a/2 is not a/2 again byte for byte (%d requests)", len(copies))
			}
			if d := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test")) - resends; d != 1 {
				t.Errorf("kubewire_kafka_produce_resends_total grew by %v, want 1", d)
			}
			id2, epoch2, seq2, _ := kafka.ProducerState(s, topic, 0)
			if id2 != id || epoch2 != epoch || seq2 != seq+2 {
				t.Errorf("producer %d epoch %d sequence %d, want %d, %d, %d: a/2 and b/3 under the same epoch",
					id2, epoch2, seq2, id, epoch, seq+2)
			}
		})
	}
}

// Each class of answer, given before anything is appended. An answer that
// leaves the batch possibly in the log, and a refusal the broker may not
// repeat, keep a/2 pending: the next request is a/2 again, byte for byte.
// A refusal for good drops it, and b/3 takes its sequence in the same
// epoch: nothing of a/2 is in the log or on its way there. A batch
// refused as too large goes out again one record at a time.
func TestEachClassOfProduceAnswerDecidesWhetherTheBatchGoesOutAgainUnchanged(t *testing.T) {
	type class struct {
		name    string
		answers []answerCase
		resent  bool   // a/2 goes out again, unchanged, ahead of b/3
		aFails  bool   // the first Write of a/2 fails
		want    string // what the partition finally holds
	}
	for _, cl := range []class{
		{"in doubt", inDoubtAnswers, true, true, "warm-up/1,a/2,b/3"},
		{"retriable before the append", retriableAnswers, true, true, "warm-up/1,a/2,b/3"},
		{"refused for good before the append", refusedAnswers, false, true, "warm-up/1,b/3,a/2"},
		{"too large", tooLargeAnswers, false, false, "warm-up/1,a/2,b/3"},
	} {
		for _, c := range cl.answers {
			t.Run(fmt.Sprintf("%s is %s.", c.name, cl.name), func(t *testing.T) {
				f := startFake(t)
				s, prefix, _ := newLoggedSink(t, f.addr(), nil)
				connect(t, s)
				w := &writes{t: t, s: s}
				if err := w.write("warm-up", 1); err != nil {
					t.Fatalf("Write: %v", err)
				}
				topic := widgetTopic(prefix)
				id, epoch, seq, _ := kafka.ProducerState(s, topic, 0)

				sent := answerInTurn(f, c.code)
				if err := w.write("a", 2); (err != nil) != cl.aFails {
					t.Fatalf("the Write of a/2 answered %s returned %v", c.name, err)
				}
				if err := w.write("b", 3); err != nil {
					t.Errorf("the Write of b/3 failed: %v", err)
				}
				if cl.aFails {
					if err := w.write("a", 2); err != nil {
						t.Errorf("the retry of a/2 failed: %v", err)
					}
				}
				w.check(f, topic, cl.want)

				copies := sent.all()
				if len(copies) < 2 {
					t.Fatalf("%d produce requests, want at least 2", len(copies))
				}
				_, _, seq0 := producerFields(copies[0])
				_, _, seq1 := producerFields(copies[1])
				switch {
				case cl.resent && !bytes.Equal(copies[0], copies[1]):
					t.Errorf("the request after a/2 is not a/2 again byte for byte")
				case !cl.resent && cl.aFails && (!carries(copies[1], "b") || seq1 != seq0):
					t.Errorf("the request after a/2 carries b/3: %v, with sequence %d, want a/2's %d", carries(copies[1], "b"), seq1, seq0)
				}
				id2, epoch2, seq2, _ := kafka.ProducerState(s, topic, 0)
				if id2 != id || epoch2 != epoch || seq2 != seq+2 {
					t.Errorf("producer %d epoch %d sequence %d, want %d, %d, %d: nothing was given up",
						id2, epoch2, seq2, id, epoch, seq+2)
				}
			})
		}
	}
}

// A pending batch that the broker then refuses for good cannot go out
// again. If an earlier copy's fate is unknown, that copy may still land,
// so the records go out again under a new epoch, which fences it. If
// every earlier copy was refused before the append, nothing of the batch
// is in the log: the next batch takes its sequence in the same epoch.
func TestARefusalForGoodAfterAnAnswerInDoubtMovesToANewEpochAndAfterARetriableOneKeepsTheSequence(t *testing.T) {
	for _, c := range []struct {
		first    answerCase
		newEpoch bool
	}{
		{answerCase{"NOT_LEADER_OR_FOLLOWER", 6}, true},
		{answerCase{"NOT_ENOUGH_REPLICAS", 19}, false},
	} {
		t.Run(c.first.name+", then INVALID_RECORD.", func(t *testing.T) {
			f := startFake(t)
			s, prefix, _ := newLoggedSink(t, f.addr(), nil)
			connect(t, s)
			w := &writes{t: t, s: s}
			if err := w.write("warm-up", 1); err != nil {
				t.Fatalf("Write: %v", err)
			}
			topic := widgetTopic(prefix)
			id, epoch, seq, _ := kafka.ProducerState(s, topic, 0)

			sent := answerInTurn(f, c.first.code, 87)
			if err := w.write("a", 2); err == nil {
				t.Fatalf("the Write of a/2 answered %s reported success", c.first.name)
			}
			if err := w.write("b", 3); err == nil {
				t.Fatal("the Write of b/3 reported success behind a batch refused for good")
			}
			copies := sent.all()
			if len(copies) != 2 || !bytes.Equal(copies[0], copies[1]) {
				t.Errorf("%d requests; want a/2, then a/2 again byte for byte and nothing else", len(copies))
			}
			id2, epoch2, seq2, _ := kafka.ProducerState(s, topic, 0)
			wantEpoch, wantSeq := epoch, seq
			if c.newEpoch {
				wantEpoch, wantSeq = epoch+1, 0
			}
			if id2 != id || epoch2 != wantEpoch || seq2 != wantSeq {
				t.Errorf("producer %d epoch %d sequence %d, want %d, %d, %d", id2, epoch2, seq2, id, wantEpoch, wantSeq)
			}
			// The dispatcher's retries.
			if err := w.write("a", 2); err != nil {
				t.Errorf("the retry of a/2 failed: %v", err)
			}
			if err := w.write("b", 3); err != nil {
				t.Errorf("the retry of b/3 failed: %v", err)
			}
			w.check(f, topic, "warm-up/1,a/2,b/3")
		})
	}
}

// The partition's leader moves to another broker. The old leader answers
// NOT_LEADER_OR_FOLLOWER and a/2 stays pending; each retry of the Write
// sends exactly one copy of it (no copies in between), and once kafka-go's
// metadata, refreshed every MetadataTTL, names the new leader, the copy
// goes there and a/2 is in the log once.
func TestAResendAfterNotLeaderReachesTheNewLeaderAndEachRetrySendsOneCopy(t *testing.T) {
	ports := testkit.FreePorts(t, 2)
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.Ports(ports...), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	f := &fakeKafka{c: c, port: ports[0]}
	s, prefix, _ := newLoggedSink(t, f.addr(), nil)
	connect(t, s)
	w := &writes{t: t, s: s}
	if err := w.write("warm-up", 1); err != nil {
		t.Fatalf("Write: %v", err)
	}
	topic := widgetTopic(prefix)
	id, epoch, seq, _ := kafka.ProducerState(s, topic, 0)

	var produced atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		produced.Add(1)
		return nil, nil, false
	})
	old := c.LeaderFor(topic, 0)
	next := int32(0)
	if old == 0 {
		next = 1
	}
	if err := c.MoveTopicPartition(topic, 0, next); err != nil {
		t.Fatal(err)
	}

	resends := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test"))
	attempts := 0
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		attempts++
		err := w.write("a", 2)
		if err == nil {
			break
		}
		if !errors.Is(err, kafkago.NotLeaderForPartition) {
			t.Fatalf("attempt %d: %v, want NOT_LEADER_OR_FOLLOWER until the sink finds the new leader", attempts, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a/2 did not reach the new leader in 15s (%d attempts)", attempts)
		}
		<-tick.C
	}
	if attempts < 2 {
		t.Skip("kafka-go refreshed its metadata between the move and the first Write: no refusal to retry")
	}
	if n := int(produced.Load()); n != attempts {
		t.Errorf("%d produce requests for %d Writes: want one per Write, no more", n, attempts)
	}
	if d := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test")) - resends; int(d) != attempts-1 {
		t.Errorf("kubewire_kafka_produce_resends_total grew by %v, want %d", d, attempts-1)
	}
	id2, epoch2, seq2, _ := kafka.ProducerState(s, topic, 0)
	if id2 != id || epoch2 != epoch || seq2 != seq+1 {
		t.Errorf("producer %d epoch %d sequence %d, want %d, %d, %d", id2, epoch2, seq2, id, epoch, seq+1)
	}
	w.check(f, topic, "warm-up/1,a/2")
}
