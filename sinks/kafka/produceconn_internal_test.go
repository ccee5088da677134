package kafka

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// The sink frames its Produce requests itself (produceconn.go); a broker
// must get the bytes kafka-go's encoder would have sent for RawProduce, in
// every version the sink speaks.
func TestTheProduceRequestIsTheOneKafkaGoWrites(t *testing.T) {
	// A record set as the partition hands it over: its size, then the
	// batch; both encoders copy it as it is.
	records := append([]byte{0, 0, 0, 9}, []byte("recordset")...)
	for v := int16(minProduceVersion); v <= maxProduceVersion; v++ {
		c := &produceConn{clientID: "kubewire-test", version: v, corr: 41}
		got := c.appendRequest(nil, "k8s.core.configmaps", 5, kafkago.RequireAll, 1500*time.Millisecond, records)

		var want bytes.Buffer
		err := protocol.WriteRequest(&want, v, 41, "kubewire-test", &rawproduce.Request{
			Acks:    -1,
			Timeout: 1500,
			Topics: []rawproduce.RequestTopic{{
				Topic: "k8s.core.configmaps",
				Partitions: []rawproduce.RequestPartition{{
					Partition: 5,
					RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(records)},
				}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("v%d: the sink wrote\n%q\nkafka-go writes\n%q", v, got, want.Bytes())
		}
	}
}

// The answer the sink parses must be what kafka-go's RawProduce returned
// for the same bytes: the partition's error (with its message from v8),
// offsets, record errors and throttle.
func TestTheProduceAnswerIsReadAsKafkaGoReadsIt(t *testing.T) {
	for v := int16(minProduceVersion); v <= maxProduceVersion; v++ {
		for _, code := range []int16{0, int16(kafkago.NotLeaderForPartition)} {
			part := produce.ResponsePartition{Partition: 5, ErrorCode: code, BaseOffset: 1234,
				LogAppendTime: 1_700_000_000_123, LogStartOffset: 17}
			want := &kafkago.ProduceResponse{Throttle: 7 * time.Millisecond, BaseOffset: 1234,
				LogAppendTime: time.UnixMilli(1_700_000_000_123)}
			if v >= 5 {
				want.LogStartOffset = 17
			}
			if code != 0 {
				want.Error = kafkago.Error(code)
			}
			if v >= 8 {
				part.RecordErrors = []produce.ResponseError{{BatchIndex: 2, BatchIndexErrorMessage: "bad record"}}
				want.RecordErrors = map[int]error{2: errors.New("bad record")}
				if code != 0 {
					part.ErrorMessage = "moved"
				}
			}
			var b bytes.Buffer
			err := protocol.WriteResponse(&b, v, 41, &produce.Response{ThrottleTimeMs: 7,
				Topics: []produce.ResponseTopic{{Topic: "k8s.core.configmaps", Partitions: []produce.ResponsePartition{part}}}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseProduceAnswer(b.Bytes()[8:], v, "k8s.core.configmaps", 5)
			if err != nil {
				t.Fatalf("v%d: %v", v, err)
			}
			if code != 0 && !errors.Is(got.Error, kafkago.Error(code)) {
				t.Errorf("v%d: error %v, want %v", v, got.Error, kafkago.Error(code))
			}
			if v >= 8 && code != 0 && got.Error.Error() != kafkago.Error(code).Error()+": moved" {
				t.Errorf("v%d: error %q lost the broker's message", v, got.Error)
			}
			got.Error, want.Error = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("v%d code %d:\n got  %+v\n want %+v", v, code, got, want)
			}
		}
	}
}

// An answer that is cut short or names another partition is an error,
// never a success or a panic.
func TestAMalformedProduceAnswerIsAnError(t *testing.T) {
	var b bytes.Buffer
	err := protocol.WriteResponse(&b, 8, 41, &produce.Response{Topics: []produce.ResponseTopic{{Topic: "t",
		Partitions: []produce.ResponsePartition{{Partition: 5, ErrorMessage: "x"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	body := b.Bytes()[8:]
	for n := 0; n < len(body); n++ {
		if _, err := parseProduceAnswer(body[:n], 8, "t", 5); !errors.Is(err, errBadProduceAnswer) {
			t.Fatalf("the answer cut to %d of %d bytes: err = %v", n, len(body), err)
		}
	}
	if _, err := parseProduceAnswer(body, 8, "t", 6); !errors.Is(err, errBadProduceAnswer) {
		t.Errorf("an answer for another partition: err = %v", err)
	}
	if _, err := parseProduceAnswer(body, 8, "u", 5); !errors.Is(err, errBadProduceAnswer) {
		t.Errorf("an answer for another topic: err = %v", err)
	}
}

// A produce connection idle for longer than the Transport's IdleTimeout
// may have been closed by the broker: it is closed and a new one dialled,
// while a fresh one is reused as it is.
func TestAProduceConnectionIdleTooLongIsNotReused(t *testing.T) {
	dials := 0
	tr := &kafkago.Transport{IdleTimeout: time.Minute, Dial: func(context.Context, string, string) (net.Conn, error) {
		dials++
		return nil, errors.New("no broker in this test")
	}}
	cs := newProduceConns(nil, tr)
	fresh, freshPeer := net.Pipe()
	defer freshPeer.Close()
	cs.put(&produceConn{addr: "broker:9092", nc: fresh})
	c, err := cs.get(context.Background(), "broker:9092")
	if err != nil || c.nc != fresh || dials != 0 {
		t.Fatalf("a connection idle for no time was not reused: %v, %d dials", err, dials)
	}
	cs.put(c)
	c.idleAt = time.Now().Add(-2 * time.Minute)
	if _, err := cs.get(context.Background(), "broker:9092"); err == nil || dials != 1 {
		t.Fatalf("a connection idle for 2 minutes was reused (err %v, %d dials)", err, dials)
	}
	if _, err := freshPeer.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the stale connection was left open: read %v", err)
	}
}
