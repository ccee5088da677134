package kafka

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/kubewire/kubewire/internal/base/tick"
	"github.com/kubewire/kubewire/internal/base/tlsfiles"
	"github.com/kubewire/kubewire/sinks"
)

// Connection health.
//
// kafka-go has no connection callbacks, so the sink reports what its own
// requests see (sinks.ConnectionNotifier): a produce, producer id or topic
// request that the broker answers says the connection is up, one that fails
// for a connection reason (see isConnectionError) says it is down, and a
// broker's refusal of a record (too large, say) says nothing, since the
// broker did answer. An idle sink makes no requests, so a probe checks the
// connection whenever no request has succeeded for probeInterval.
//
// The probe cannot be a plain Metadata request: kafka-go's Transport answers
// Metadata from its cache, and once it has seen the cluster's layout it
// keeps answering with it, hiding the errors of its own refreshes, however
// long the brokers are gone. So the probe is an ApiVersions request, the
// lightest request Kafka has, sent on the transport's control connection
// with the sink's TLS and SASL settings; it dials again when that connection
// broke. Then it reads the sink's topics from the metadata the transport
// refreshes every MetadataTTL, and reports a partition without a leader as
// down: nothing can be produced to it.

// probeInterval is how long the sink may go without a successful request
// before the probe checks the connection. It bounds how long an idle sink
// whose brokers went away still looks healthy in /readyz: one to two
// intervals when the brokers' hosts refuse the connection, and up to
// requestTimeout more when packets to them are silently dropped. Ten
// seconds keeps that near a readiness probe's usual failure window
// (3 × 10 s) and costs the broker one tiny request per interval; a busy
// sink sends no probes at all.
const probeInterval = 10 * time.Second

// link is what the sink last reported of its connection.
type link struct {
	// up is the dispatcher's callback, nil until NotifyConnection.
	up atomic.Pointer[func(bool)]
	// state is linkUnknown, linkUp or linkDown. It is read without mu on the
	// hot path, and changed under mu, together with the call of up, so that
	// the dispatcher's view never ends up older than the sink's.
	state atomic.Int32
	mu    sync.Mutex
	// lastOK is when a request last succeeded, as time since start: the
	// probe skips an interval in which one did.
	start  time.Time
	lastOK atomic.Int64
}

const (
	linkUnknown int32 = iota
	linkUp
	linkDown
)

var _ sinks.ConnectionNotifier = (*Sink)(nil)

// NotifyConnection implements sinks.ConnectionNotifier: up(false) when a
// request or the idle probe fails for a connection reason, up(true) when one
// succeeds again.
func (s *Sink) NotifyConnection(up func(bool)) { s.link.up.Store(&up) }

// observe reports the outcome of a request that went to a broker: nil is
// up, a connection error (isConnectionError) is down, and anything else (a
// broker's answer that refuses a record, a closing sink) is no news.
func (s *Sink) observe(err error) {
	switch {
	case err == nil:
		s.link.lastOK.Store(int64(time.Since(s.link.start)))
		s.setLink(linkUp, nil)
	case isConnectionError(err):
		s.setLink(linkDown, err)
	}
}

func (s *Sink) setLink(state int32, err error) {
	l := &s.link
	if l.state.Load() == state {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.Swap(state) == state {
		return
	}
	if state == linkDown {
		s.log.Info("Kafka connection check failed", "err", err)
	}
	if f := l.up.Load(); f != nil {
		(*f)(state == linkUp)
	}
}

// isConnectionError reports whether err means the sink cannot reach a
// broker, or a partition leader, at all: a dial, TLS or SASL failure, a
// connection that broke or timed out, or metadata without a leader. A
// broker's answer that refuses a request (MessageSizeTooLarge, an
// authorization error on a topic) is not one, and neither is a context
// cancelled because the sink or the dispatcher is closing.
func isConnectionError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, protocol.ErrNoLeader) {
		return true
	}
	// kafkago.Error has Timeout and Temporary methods, so it is a net.Error
	// too: broker answers are sorted first, by code.
	var ke kafkago.Error
	if errors.As(err, &ke) {
		return slices.Contains(connectionCodes, ke)
	}
	if tlsfiles.IsTLSError(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// connectionCodes are the Kafka error codes that mean the broker or the
// partition's leader cannot be used, or the client may not connect at all.
var connectionCodes = []kafkago.Error{
	kafkago.BrokerNotAvailable,
	kafkago.LeaderNotAvailable,
	kafkago.NotLeaderForPartition,
	kafkago.NetworkException,
	kafkago.SASLAuthenticationFailed,
	kafkago.UnsupportedSASLMechanism,
	kafkago.IllegalSASLState,
}

// watchConnection probes the connection every interval in which no request
// succeeded, until ctx ends (the sink closes). It logs nothing on its own
// when it stops.
func (s *Sink) watchConnection(ctx context.Context, every time.Duration) {
	defer s.wg.Done()
	tick.Every(ctx, every, func() {
		if time.Since(s.link.start)-time.Duration(s.link.lastOK.Load()) < every {
			return // a request succeeded within the interval
		}
		s.probe(ctx)
	})
}

// probe checks the connection once (see the comment at the top of this
// file) and reports what it found.
func (s *Sink) probe(ctx context.Context) {
	s.mu.Lock()
	client := s.client
	names := make([]string, 0, len(s.topics))
	for name := range s.topics {
		names = append(names, name)
	}
	s.mu.Unlock()
	if client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout.Duration)
	defer cancel()
	if _, err := client.ApiVersions(ctx, &kafkago.ApiVersionsRequest{}); err != nil {
		s.observe(err)
		return
	}
	if len(names) > 0 {
		md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: names})
		if err != nil {
			s.observe(err)
			return
		}
		for _, t := range md.Topics {
			for _, p := range t.Partitions {
				if isConnectionError(p.Error) {
					s.observe(p.Error)
					return
				}
			}
		}
	}
	s.observe(nil)
}

// startWatching starts the probe once, after the first successful Connect.
// It runs in the sink's wait group, so Close waits for it.
func (s *Sink) startWatching() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.watching {
		return
	}
	s.watching = true
	s.wg.Add(1)
	go s.watchConnection(s.life, s.probeEvery)
}
