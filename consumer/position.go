package consumer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Position is where one event sits in its broker: a Kafka partition
// ("<topic>/<partition>", see KafkaPartition) and offset, or a JetStream
// stream and sequence. Offsets grow within a partition.
type Position struct {
	Partition string
	Offset    int64
}

// KafkaPartition names a Kafka partition as a View's positions do.
func KafkaPartition(topic string, partition int) string {
	return topic + "/" + strconv.Itoa(partition)
}

// Positions maps each partition to the offset of the next event to read in
// it: everything before has been applied.
type Positions map[string]int64

// rvPrefix tells our resourceVersions from an API server's.
const rvPrefix = "kw1."

// encode writes the positions as an opaque resourceVersion.
func (p Positions) encode() string {
	b, _ := json.Marshal(map[string]int64(p))
	return rvPrefix + base64.RawURLEncoding.EncodeToString(b)
}

var errForeignRV = errors.New("not a resourceVersion of this consumer")

// decodePositions reads a resourceVersion written by encode.
func decodePositions(rv string) (Positions, error) {
	s, ok := strings.CutPrefix(rv, rvPrefix)
	if !ok {
		return nil, errForeignRV
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errForeignRV
	}
	p := Positions{}
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, errForeignRV
	}
	return p, nil
}
