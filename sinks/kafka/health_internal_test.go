package kafka

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

func TestConnectionErrorsAreToldFromBrokerAnswersByTypeNotByText(t *testing.T) {
	// A real refused dial, as kafka-go's dialer returns it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, dialErr := net.Dial("tcp", addr)
	if dialErr == nil {
		t.Fatal("dialing a closed port succeeded")
	}
	wrap := func(err error) error { return fmt.Errorf("kafka: produce 3 records to t[0]: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a refused dial is a connection error", wrap(dialErr), true},
		{"a connection the broker closed (EOF) is one", wrap(io.EOF), true},
		{"a connection cut mid-answer is one", wrap(io.ErrUnexpectedEOF), true},
		{"a broken pipe is one", wrap(&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}), true},
		{"a reset connection is one", wrap(syscall.ECONNRESET), true},
		{"a read timeout is one", wrap(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}), true},
		{"a request deadline that passed is one", wrap(context.DeadlineExceeded), true},
		{"a partition without a leader in the metadata is one", wrap(protocol.NewErrNoLeader("t", 0)), true},
		{"a broker answering leader not available is one", wrap(kafkago.LeaderNotAvailable), true},
		{"a broker answering not leader for partition is one", wrap(kafkago.NotLeaderForPartition), true},
		{"a broker not available is one", wrap(kafkago.BrokerNotAvailable), true},
		{"failed SASL authentication is one", wrap(kafkago.SASLAuthenticationFailed), true},
		{"an unknown certificate authority is one", wrap(x509.UnknownAuthorityError{}), true},
		{"a record refused as too large is not", wrap(kafkago.MessageSizeTooLarge), false},
		{"a record list refused as too large is not", wrap(kafkago.RecordListTooLarge), false},
		{"a topic the principal may not write is not", wrap(kafkago.TopicAuthorizationFailed), false},
		{"an unknown topic is not", wrap(kafkago.UnknownTopicOrPartition), false},
		{"a broker-side replication timeout is not", wrap(kafkago.RequestTimedOut), false},
		{"a cancelled context (a closing sink) is not", wrap(context.Canceled), false},
		{"a write after Close is not", wrap(ErrClosed), false},
		{"no error is not", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isConnectionError(tc.err); got != tc.want {
				t.Errorf("isConnectionError(%v) = %t, want %t", tc.err, got, tc.want)
			}
		})
	}
	if !errors.Is(wrap(protocol.NewErrNoLeader("t", 0)), protocol.ErrNoLeader) {
		t.Fatal("kafka-go's no-leader error no longer wraps protocol.ErrNoLeader")
	}
}
