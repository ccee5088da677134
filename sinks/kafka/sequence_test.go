package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/testing/testkit"
	"github.com/kubewire/kubewire/sinks"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

// newLoggedSink is newSink on a single partition, with the sink's log
// going to the returned buffer.
func newLoggedSink(t *testing.T, addr string, edit func(*kafka.Config)) (sinks.Sink, string, *testkit.Buffer) {
	t.Helper()
	prefix := uniquePrefix(t)
	kc := &kafka.Config{
		Brokers:        []string{addr},
		Topic:          prefix + ".{group}.{resource}",
		CreateTopics:   &kafka.CreateTopics{Partitions: 1, ReplicationFactor: 1},
		RequestTimeout: config.NewDuration(10 * time.Second),
		DialTimeout:    config.NewDuration(2 * time.Second),
		Batch:          &kafka.Batch{Linger: config.NewDuration(0)},
	}
	if edit != nil {
		edit(kc)
	}
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := kafka.New("kafka-test", kc, sinks.Deps{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return s, prefix, logs
}

// produceAnswer is the broker's answer to req with code as every
// partition's error.
func produceAnswer(req kmsg.Request, code int16) kmsg.Response {
	pr := req.(*kmsg.ProduceRequest)
	res := pr.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range pr.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		res.Topics = append(res.Topics, st)
	}
	return res
}

// producerFields reads the producer id, epoch and base sequence of the v2
// record batch a produce request carries.
func producerFields(raw []byte) (id int64, epoch int16, seq int32) {
	return int64(binary.BigEndian.Uint64(raw[43:])), int16(binary.BigEndian.Uint16(raw[51:])), int32(binary.BigEndian.Uint32(raw[53:]))
}

func names(t *testing.T, addr, topic string) string {
	t.Helper()
	var got []string
	for _, ev := range decodeRecords(t, readTopic(context.Background(), t, addr, topic)) {
		got = append(got, ev.Extensions()[encoding.ExtName].(string)+"/"+ev.Extensions()[encoding.ExtResourceVersion].(string))
	}
	return strings.Join(got, ",")
}

// The broker answers a produce request with an error that leaves the batch
// possibly appended (REQUEST_TIMED_OUT: acks=all gave up waiting for
// replicas, after the leader appended). The retry of the Write sends the
// very same bytes, with the same producer id, epoch and sequence, so the
// broker can recognise a copy it already holds.
func TestABatchWhoseFateIsUnknownGoesOutAgainByteForByte(t *testing.T) {
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), nil)
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1)) // creates the topic
	topic := widgetTopic(prefix)

	produced := timeOutTheFirstProduce(f)
	resends := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test"))
	evs := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
	if err := s.Write(context.Background(), evs); err == nil {
		t.Fatal("a Write answered with REQUEST_TIMED_OUT reported success")
	}
	if err := s.Write(context.Background(), evs); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	f.c.DropControl()

	copies := produced()
	if len(copies) != 2 {
		t.Fatalf("%d produce requests, want the batch and one resend", len(copies))
	}
	if !bytes.Equal(copies[0], copies[1]) {
		id0, e0, s0 := producerFields(copies[0])
		id1, e1, s1 := producerFields(copies[1])
		t.Errorf("the resend differs from the first copy: producer %d/%d/%d, then %d/%d/%d", id0, e0, s0, id1, e1, s1)
	}
	if d := testutil.ToFloat64(kafka.ProduceResends.WithLabelValues("kafka-test")) - resends; d != 1 {
		t.Errorf("kubewire_kafka_produce_resends_total grew by %v, want 1", d)
	}
	if got := names(t, f.addr(), topic); got != "warm-up/1,a/2" {
		t.Errorf("the partition holds %s, want warm-up/1,a/2", got)
	}
}

// Later traffic on the partition of a batch in doubt: the next Write's
// request first sends that batch again, byte for byte, then its own records
// in a new batch; batches reuse the storage of the ones acknowledged before
// them, which must leave every copy intact. The retry of the Write in doubt
// then sends nothing: its record is in the log.
func TestABatchInDoubtGoesOutByteForByteAheadOfLaterTraffic(t *testing.T) {
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), nil)
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
	topic := widgetTopic(prefix)

	produced := timeOutTheFirstProduce(f)
	a2 := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
	if err := s.Write(context.Background(), a2); err == nil {
		t.Fatal("a Write answered with REQUEST_TIMED_OUT reported success")
	}
	write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "b", 3))
	write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "c", 4))
	if err := s.Write(context.Background(), a2); err != nil {
		t.Fatalf("the retry failed: %v", err)
	}
	f.c.DropControl()

	copies := produced()
	if len(copies) != 4 {
		t.Fatalf("%d produce requests, want a/2, its resend, b/3 and c/4", len(copies))
	}
	if !bytes.Equal(copies[0], copies[1]) {
		t.Errorf("the resend of a/2 differs from its first copy:\n first  %q\n resend %q", copies[0], copies[1])
	}
	for i, name := range []string{"a", "a", "b", "c"} {
		if !bytes.Contains(copies[i], []byte(`"name":"`+name+`"`)) {
			t.Errorf("produce request %d does not carry %s: %q", i, name, copies[i])
		}
	}
	if got := names(t, f.addr(), topic); got != "warm-up/1,a/2,b/3,c/4" {
		t.Errorf("the partition holds %s, want warm-up/1,a/2,b/3,c/4", got)
	}
}

// What the partition sends after a failed request, while the Write that
// held it has not come back (the dispatcher backs off): a batch the broker
// may have appended goes out again first, unchanged; a batch the broker
// refused for good before appending anything (INVALID_RECORD) is not
// resent, and the next batch takes its sequence in the same epoch.
// NOT_LEADER_OR_FOLLOWER is no such refusal: with acks=all a leader that
// loses its leadership answers it after the append.
func TestOnlyABatchThatMayBeInTheLogIsResentBeforeTheNextOne(t *testing.T) {
	for _, c := range []struct {
		name string
		code int16
		want string
	}{
		{"REQUEST_TIMED_OUT leaves a/2 possibly appended, so it goes out again first.", 7, "warm-up/1,a/2,b/3"},
		{"NOT_LEADER_OR_FOLLOWER leaves a/2 possibly appended, so it goes out again first.", 6, "warm-up/1,a/2,b/3"},
		{"INVALID_RECORD refused a/2 for good, so b/3 goes out alone.", 87, "warm-up/1,b/3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFake(t)
			s, prefix, _ := newLoggedSink(t, f.addr(), nil)
			connect(t, s)
			write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
			topic := widgetTopic(prefix)
			id, epoch, seq, _ := kafka.ProducerState(s, topic, 0)

			f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				return produceAnswer(req, c.code), nil, true
			})
			a2 := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
			if err := s.Write(context.Background(), a2); err == nil {
				t.Fatal("a Write the broker refused reported success")
			}
			write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "b", 3))
			if got := names(t, f.addr(), topic); got != c.want {
				t.Errorf("the partition holds %s, want %s", got, c.want)
			}
			id2, epoch2, _, _ := kafka.ProducerState(s, topic, 0)
			if id2 != id || epoch2 != epoch {
				t.Errorf("producer %d epoch %d, want %d epoch %d: nothing was given up", id2, epoch2, id, epoch)
			}
			if c.code == 87 {
				if _, _, seq2, _ := kafka.ProducerState(s, topic, 0); seq2 != seq+1 {
					t.Errorf("sequence %d after b/3, want %d: b/3 takes the refused batch's sequence", seq2, seq+1)
				}
			}
		})
	}
}

// A broker that answers DUPLICATE_SEQUENCE_NUMBER (as brokers before
// Kafka 1.0 do for a copy they already hold) has the batch: the Write
// succeeds, and the producer goes on after it in the same epoch.
func TestADuplicateSequenceAnswerCountsAsAcknowledged(t *testing.T) {
	f := startFake(t)
	s, prefix, _ := newLoggedSink(t, f.addr(), nil)
	connect(t, s)
	write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
	id, epoch, seq, _ := kafka.ProducerState(s, widgetTopic(prefix), 0)

	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		return produceAnswer(req, 46), nil, true // DUPLICATE_SEQUENCE_NUMBER
	})
	write(t, s, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))
	id2, epoch2, seq2, _ := kafka.ProducerState(s, widgetTopic(prefix), 0)
	if id2 != id || epoch2 != epoch || seq2 != seq+1 {
		t.Errorf("producer %d epoch %d sequence %d after the duplicate, want %d, %d, %d", id2, epoch2, seq2, id, epoch, seq+1)
	}
}

// OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID say the broker holds
// something other than what it acknowledged to this producer, which can
// mean it lost acknowledged records. kubewire logs that at ERROR, counts it,
// and recovers: the partition moves to a new epoch, and the retry lands.
func TestASequenceErrorIsReportedAsPossibleDataLossAndThePartitionRecoversUnderANewEpoch(t *testing.T) {
	for _, c := range []struct {
		name  string
		code  int16
		label string
	}{
		{"OUT_OF_ORDER_SEQUENCE_NUMBER", 45, "out_of_order_sequence_number"},
		{"UNKNOWN_PRODUCER_ID", 59, "unknown_producer_id"},
	} {
		t.Run("The broker answers "+c.name+".", func(t *testing.T) {
			f := startFake(t)
			s, prefix, logs := newLoggedSink(t, f.addr(), nil)
			connect(t, s)
			write(t, s, sinktest.Change(informer.OpAdded, "team-a", "warm-up", 1))
			topic := widgetTopic(prefix)
			id, epoch, _, _ := kafka.ProducerState(s, topic, 0)

			f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				return produceAnswer(req, c.code), nil, true
			})
			before := testutil.ToFloat64(kafka.SequenceErrors.WithLabelValues("kafka-test", c.label))
			evs := []*encoding.Event{mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "a", 2))}
			if err := s.Write(context.Background(), evs); err == nil {
				t.Fatalf("a Write answered with %s reported success", c.name)
			}
			if d := testutil.ToFloat64(kafka.SequenceErrors.WithLabelValues("kafka-test", c.label)) - before; d != 1 {
				t.Errorf("kubewire_kafka_producer_sequence_errors_total{error=%q} grew by %v, want 1", c.label, d)
			}
			var line string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "may have lost records") {
					line = l
				}
			}
			if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "partition=0") || !strings.Contains(line, "topic="+topic) {
				t.Errorf("no ERROR naming the topic and partition as possible data loss; the log:\n%s", logs.String())
			}
			id2, epoch2, seq2, _ := kafka.ProducerState(s, topic, 0)
			if id2 != id || epoch2 != epoch+1 || seq2 != 0 {
				t.Errorf("producer %d epoch %d sequence %d after %s, want %d at epoch %d, sequence 0", id2, epoch2, seq2, c.name, id, epoch+1)
			}

			// The dispatcher's retry.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Write(ctx, evs); err != nil {
				t.Fatalf("the retry failed: %v", err)
			}
			if got := names(t, f.addr(), topic); got != "warm-up/1,a/2" {
				t.Errorf("the partition holds %s, want warm-up/1,a/2", got)
			}
		})
	}
}

// timeOutTheFirstProduce makes the fake broker answer the next produce
// request REQUEST_TIMED_OUT (the replicas did not confirm, after the leader
// appended) and serve the later ones; produced returns a copy of each
// request's records, in order.
func timeOutTheFirstProduce(f *fakeKafka) (produced func() [][]byte) {
	var mu sync.Mutex
	var copies [][]byte
	f.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		raw := append([]byte(nil), req.(*kmsg.ProduceRequest).Topics[0].Partitions[0].Records...)
		mu.Lock()
		defer mu.Unlock()
		copies = append(copies, raw)
		if len(copies) == 1 {
			return produceAnswer(req, 7), nil, true // REQUEST_TIMED_OUT
		}
		return nil, nil, false
	})
	return func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(copies)
	}
}
