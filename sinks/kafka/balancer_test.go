package kafka_test

import (
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/kubewire/kubewire/sinks/kafka"
)

// javaMurmur2 are the values of org.apache.kafka.common.utils.Utils.murmur2
// that Kafka's own UtilsTest.testMurmur2 asserts (as Java ints).
var javaMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

// javaPartition is what Java's BuiltInPartitioner.partitionForKey computes:
// Utils.toPositive(Utils.murmur2(key)) % numPartitions, where toPositive
// clears the sign bit.
func javaPartition(murmur int32, n int) int {
	return int(uint32(murmur)&0x7fffffff) % n
}

func TestTheMurmur2BalancerPicksTheSamePartitionAsJava(t *testing.T) {
	b, err := kafka.NewBalancer(kafka.BalancerMurmur2)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 2, 3, 6, 7, 12, 50, 100} {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		for key, murmur := range javaMurmur2 {
			want := javaPartition(murmur, n)
			if got := b.Balance(kafkago.Message{Key: []byte(key)}, ids...); got != want {
				t.Errorf("key %q over %d partitions: partition %d, Java picks %d", key, n, got, want)
			}
		}
	}
}

func TestEveryBalancerIsAFunctionOfTheKey(t *testing.T) {
	for _, name := range []string{kafka.BalancerMurmur2, kafka.BalancerCRC32, kafka.BalancerHash} {
		b, err := kafka.NewBalancer(name)
		if err != nil {
			t.Fatal(err)
		}
		ids := []int{0, 1, 2, 3, 4, 5, 6, 7}
		for _, key := range []string{"", "pods/default/a", "widgets.demo.kubewire.io/team-a/cm-1"} {
			first := b.Balance(kafkago.Message{Key: []byte(key)}, ids...)
			for range 20 {
				if got := b.Balance(kafkago.Message{Key: []byte(key)}, ids...); got != first {
					t.Fatalf("%s sends key %q to partition %d, then %d", name, key, first, got)
				}
			}
		}
	}
}
