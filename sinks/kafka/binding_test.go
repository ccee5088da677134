package kafka_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	kafkasarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/informer"
	"github.com/kubewire/kubewire/sinks/kafka"
	"github.com/kubewire/kubewire/sinks/sinktest"
)

func headerMap(m kafkago.Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// decodeWithSDK reads m back with sdk-go's own Kafka binding (code we did
// not write), the way a sarama consumer would.
func decodeWithSDK(t *testing.T, m kafkago.Message) *kafkasaramaEvent {
	t.Helper()
	cm := &sarama.ConsumerMessage{Key: m.Key, Value: m.Value, Topic: "t", Partition: 0, Offset: 7}
	for _, h := range m.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	msg := kafkasarama.NewMessageFromConsumerMessage(cm)
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("sdk-go cannot read the message: %v", err)
	}
	// The reader adds where it read the record from; not part of the event.
	for _, x := range []string{"kafkaoffset", "kafkapartition", "kafkatopic"} {
		if err := ev.Context.SetExtension(x, nil); err != nil {
			t.Fatal(err)
		}
	}
	return &kafkasaramaEvent{Event: ev, enc: msg.ReadEncoding()}
}

type kafkasaramaEvent struct {
	Event *event.Event
	enc   binding.Encoding
}

func TestBinaryModeFollowsTheKafkaBinding(t *testing.T) {
	ev := mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "cm-1", 42))
	m := kafka.EncodeMessage(ev, false)
	h := headerMap(m)
	want := map[string]string{
		"ce_specversion":     "1.0",
		"ce_id":              ev.ID(),
		"ce_source":          ev.Source(),
		"ce_type":            encoding.TypeUpdated,
		"ce_subject":         "team-a/cm-1",
		"content-type":       "application/json",
		"ce_partitionkey":    "widgets.demo.kubewire.io/team-a/cm-1",
		"ce_resourceversion": "42",
		"ce_namespace":       "team-a",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	if _, ok := h["ce_datacontenttype"]; ok {
		t.Error("datacontenttype must travel as content-type, not ce_datacontenttype")
	}
	for k := range h {
		if k != strings.ToLower(k) {
			t.Errorf("header %q is not lowercase", k)
		}
	}
	if string(m.Key) != "widgets.demo.kubewire.io/team-a/cm-1" {
		t.Errorf("key = %q, want the partitionkey", m.Key)
	}
	if string(m.Value) != string(ev.Data()) {
		t.Errorf("value is not the event data untouched:\n%s\n%s", m.Value, ev.Data())
	}

	got := decodeWithSDK(t, m)
	if got.enc != binding.EncodingBinary {
		t.Errorf("sdk-go reads the record as %s, want binary", got.enc)
	}
	sameEvent(t, ev, got.Event)
}

func TestStructuredModeFollowsTheKafkaBinding(t *testing.T) {
	ev := mustEvent(t, sinktest.Change(informer.OpDeleted, "team-b", "cm-2", 7))
	m := kafka.EncodeMessage(ev, true)
	h := headerMap(m)
	if len(h) != 1 || h["content-type"] != "application/cloudevents+json" {
		t.Errorf("headers = %v, want only content-type: application/cloudevents+json", h)
	}
	if string(m.Key) != "widgets.demo.kubewire.io/team-b/cm-2" {
		t.Errorf("key = %q, want the partitionkey", m.Key)
	}
	var body map[string]any
	if err := json.Unmarshal(m.Value, &body); err != nil {
		t.Fatalf("the value is not JSON: %v", err)
	}
	if body["id"] != ev.ID() || body["partitionkey"] != "widgets.demo.kubewire.io/team-b/cm-2" {
		t.Errorf("the JSON event lacks its attributes: %s", m.Value)
	}
	got := decodeWithSDK(t, m)
	if got.enc != binding.EncodingStructured {
		t.Errorf("sdk-go reads the record as %s, want structured", got.enc)
	}
	sameEvent(t, ev, got.Event)
}

func TestAReferenceEventRecordCarriesPlainJSONDataInBothContentModes(t *testing.T) {
	ref, err := encoding.ReferenceEvent(mustEvent(t, sinktest.Change(informer.OpUpdated, "team-a", "big", 9)))
	if err != nil {
		t.Fatal(err)
	}
	for _, structured := range []bool{false, true} {
		m := kafka.EncodeMessage(ref, structured)
		sinktest.ReferenceData(t, structured, m.Value)
		got := decodeWithSDK(t, m)
		if got.Event.DataBase64 {
			t.Errorf("structured=%v: sdk-go's Kafka reader gets base64 data, want plain JSON", structured)
		}
		sameEvent(t, ref, got.Event)
	}
}
