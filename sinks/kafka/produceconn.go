package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"
)

// The idempotent producer's requests go out on connections of the sink's
// own (produceConns), not through kafka-go's Client.RawProduce. kafka-go
// encodes a request by reflection into pooled pages, hands it to a
// connection goroutine and decodes the answer by reflection again; at a
// trickle of events that was most of the sink's CPU per event
// (docs/benchmarks.md, "The Kafka sink's own produce requests"). Here the
// partition's goroutine frames the Produce request around the record
// batch it built, writes it, and parses the answer itself.
//
// Everything else stays with kafka-go's Transport, and so does what the
// connection needs before its first request: the dial (through the same
// Dial, raw sockets), TLS with the same config, ApiVersions and SASL,
// exchanged through kafka-go's protocol.Conn as its Transport does. The
// partition's leader comes from the Transport's cached metadata, which it
// refreshes every MetadataTTL, so a request goes where RawProduce would
// have sent it; a partition forgets its leader after any failure and
// looks it up again for the next request.

// Produce versions the sink frames: v3 is the first with record batches
// (and the oldest Kafka 4 accepts); v9 is the first in the flexible
// encoding, which would buy nothing here.
const (
	minProduceVersion = 3
	maxProduceVersion = 8
	// maxProduceAnswer bounds the answer to a one-partition request: it is
	// a few dozen bytes, and a length beyond this means the stream is not
	// what we think it is.
	maxProduceAnswer = 1 << 20
	// maxIdleProduceConns is how many connections to one broker stay open
	// while idle. A partition holds one only while its request is in
	// flight, so this covers many partitions led by one broker.
	maxIdleProduceConns = 8
)

var errBadProduceAnswer = errors.New("kafka: malformed produce answer")

// produceConns are the sink's produce connections, kept per broker
// address.
type produceConns struct {
	tr     *kafkago.Transport
	client *kafkago.Client // on tr, for the leaders

	mu     sync.Mutex
	idle   map[string][]*produceConn
	closed bool
}

func newProduceConns(c *kafkago.Client, tr *kafkago.Transport) *produceConns {
	return &produceConns{tr: tr, client: c, idle: make(map[string][]*produceConn)}
}

// get returns an idle connection to addr, or dials one. A connection idle
// for longer than the Transport's IdleTimeout is closed instead: brokers
// close idle connections too (connections.max.idle.ms), and a request
// written to one of those would fail for nothing.
func (cs *produceConns) get(ctx context.Context, addr string) (*produceConn, error) {
	if c := cs.idleConn(addr, time.Now()); c != nil {
		return c, nil
	}
	cs.mu.Lock()
	closed := cs.closed
	cs.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return cs.dial(ctx, addr)
}

// idleConn takes the most recently used idle connection to addr that has
// not been idle too long, or returns nil.
func (cs *produceConns) idleConn(addr string, now time.Time) *produceConn {
	var found *produceConn
	var stale []*produceConn
	cs.mu.Lock()
	for l := cs.idle[addr]; len(l) > 0 && found == nil; l = cs.idle[addr] {
		c := l[len(l)-1]
		cs.idle[addr] = l[:len(l)-1]
		if now.Sub(c.idleAt) < cs.idleTimeout() {
			found = c
		} else {
			stale = append(stale, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range stale {
		_ = c.nc.Close() // TLS writes its close_notify: not under the lock
	}
	return found
}

// idleTimeout is kafka-go's Transport's, with its default.
func (cs *produceConns) idleTimeout() time.Duration {
	if cs.tr.IdleTimeout > 0 {
		return cs.tr.IdleTimeout
	}
	return 30 * time.Second
}

// put gives c back after a request that was answered.
func (cs *produceConns) put(c *produceConn) {
	c.idleAt = time.Now()
	cs.mu.Lock()
	if cs.closed || len(cs.idle[c.addr]) >= maxIdleProduceConns {
		cs.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	// The list is in the order of use: what has been idle too long is at
	// its start.
	l := cs.idle[c.addr]
	stale := 0
	for stale < len(l) && c.idleAt.Sub(l[stale].idleAt) >= cs.idleTimeout() {
		stale++
	}
	old := append([]*produceConn(nil), l[:stale]...)
	cs.idle[c.addr] = append(append(l[:0], l[stale:]...), c)
	cs.mu.Unlock()
	for _, o := range old {
		_ = o.nc.Close()
	}
}

// close closes the idle connections, and every other one as it is given
// back.
func (cs *produceConns) close() {
	cs.mu.Lock()
	idle := cs.idle
	cs.idle, cs.closed = map[string][]*produceConn{}, true
	cs.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.nc.Close()
		}
	}
}

// dial opens a connection to addr as kafka-go's Transport opens one:
// Dial, TLS, ApiVersions, SASL, all within DialTimeout.
func (cs *produceConns) dial(ctx context.Context, addr string) (*produceConn, error) {
	tr := cs.tr
	timeout := tr.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	nc, err := tr.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = nc.Close()
		}
	}()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if tr.TLS != nil {
		cfg := tr.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		nc = tc
	}
	_ = nc.SetDeadline(deadline)
	kc := protocol.NewConn(nc, tr.ClientID)
	m, err := kc.RoundTrip(new(apiversions.Request))
	if err != nil {
		return nil, err
	}
	res := m.(*apiversions.Response)
	if res.ErrorCode != 0 {
		return nil, fmt.Errorf("kafka: negotiating API versions with %s: %w", addr, kafkago.Error(res.ErrorCode))
	}
	versions := make(map[protocol.ApiKey]int16, len(res.ApiKeys))
	version := int16(-1)
	for _, k := range res.ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		versions[key] = key.SelectVersion(k.MinVersion, k.MaxVersion)
		if key == protocol.Produce && k.MinVersion <= maxProduceVersion && k.MaxVersion >= minProduceVersion {
			version = min(k.MaxVersion, maxProduceVersion)
		}
	}
	if version < 0 {
		return nil, fmt.Errorf("kafka: the broker at %s speaks no Produce version from %d to %d", addr, minProduceVersion, maxProduceVersion)
	}
	kc.SetVersions(versions)
	if tr.SASL != nil {
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		if err := authenticate(sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: p}), kc, tr.SASL); err != nil {
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	ok = true
	// Requests and answers alternate, so protocol.Conn's reader holds
	// nothing past the last answer: the connection's own reader starts at
	// the next one.
	return &produceConn{addr: addr, nc: nc, br: bufio.NewReader(nc), clientID: tr.ClientID, version: version}, nil
}

// authenticate runs the SASL exchange as kafka-go's Transport does.
func authenticate(ctx context.Context, kc *protocol.Conn, mech sasl.Mechanism) error {
	m, err := kc.RoundTrip(&saslhandshake.Request{Mechanism: mech.Name()})
	if err != nil {
		return err
	}
	if code := m.(*saslhandshake.Response).ErrorCode; code != 0 {
		return kafkago.Error(code)
	}
	sess, state, err := mech.Start(ctx)
	if err != nil {
		return err
	}
	for done := false; !done; {
		m, err := kc.RoundTrip(&saslauthenticate.Request{AuthBytes: state})
		if err != nil {
			if errors.Is(err, io.EOF) {
				// A broker may refuse by closing the connection.
				return kafkago.SASLAuthenticationFailed
			}
			return err
		}
		res := m.(*saslauthenticate.Response)
		if res.ErrorCode != 0 {
			return fmt.Errorf("%w: %s", kafkago.Error(res.ErrorCode), res.ErrorMessage)
		}
		if done, state, err = sess.Next(ctx, res.AuthBytes); err != nil {
			return err
		}
	}
	return nil
}

// produceConn is one connection for Produce requests, used by one
// partition's goroutine at a time.
type produceConn struct {
	addr     string
	nc       net.Conn
	br       *bufio.Reader
	clientID string
	version  int16
	corr     int32
	buf      []byte // the request being written, then the answer
	idleAt   time.Time
}

// produce sends one partition's record batch (records as kafka-go's
// RecordSet writes it: its size, then the batch) and reads the answer,
// within deadline. Any error leaves the connection unusable.
func (c *produceConn) produce(deadline time.Time, topic string, partition int32, acks kafkago.RequiredAcks, records []byte) (*kafkago.ProduceResponse, error) {
	_ = c.nc.SetDeadline(deadline)
	c.corr++
	b := c.appendRequest(c.buf[:0], topic, partition, acks, brokerAckTimeout, records)
	c.buf = b
	if _, err := c.nc.Write(b); err != nil {
		return nil, err
	}
	if acks == kafkago.RequireNone {
		return nil, nil // no answer comes
	}
	var head [8]byte
	if _, err := io.ReadFull(c.br, head[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(head[:4])) - 4
	if size < 0 || size > maxProduceAnswer {
		return nil, fmt.Errorf("%w: %d bytes", errBadProduceAnswer, size)
	}
	if corr := int32(binary.BigEndian.Uint32(head[4:])); corr != c.corr {
		return nil, fmt.Errorf("%w: correlation id %d, want %d", errBadProduceAnswer, corr, c.corr)
	}
	if cap(c.buf) < int(size) {
		c.buf = make([]byte, size)
	}
	body := c.buf[:size]
	if _, err := io.ReadFull(c.br, body); err != nil {
		return nil, err
	}
	return parseProduceAnswer(body, c.version, topic, partition)
}

// brokerAckTimeout is how long the leader waits for its followers'
// acknowledgements before it answers REQUEST_TIMED_OUT (the request's
// timeout_ms): what kafka-go's RawProduce sent, its default for a Client
// without a Timeout of its own. The request itself is bounded by
// requestTimeout, on the connection.
const brokerAckTimeout = 500 * time.Millisecond

// appendRequest appends a Produce request of one partition: the header
// (v1: api key, version, correlation id, client id) and the body, which is
// the same from v3 to v8.
func (c *produceConn) appendRequest(b []byte, topic string, partition int32, acks kafkago.RequiredAcks, timeout time.Duration, records []byte) []byte {
	b = append(b, 0, 0, 0, 0) // the size, set below
	b = binary.BigEndian.AppendUint16(b, uint16(protocol.Produce))
	b = binary.BigEndian.AppendUint16(b, uint16(c.version))
	b = binary.BigEndian.AppendUint32(b, uint32(c.corr))
	b = appendString(b, c.clientID)
	b = binary.BigEndian.AppendUint16(b, 0xffff) // transactional_id: null
	b = binary.BigEndian.AppendUint16(b, uint16(int16(acks)))
	b = binary.BigEndian.AppendUint32(b, uint32(max(int32(timeout/time.Millisecond), 0)))
	b = binary.BigEndian.AppendUint32(b, 1) // one topic
	b = appendString(b, topic)
	b = binary.BigEndian.AppendUint32(b, 1) // one partition
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	b = append(b, records...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// parseProduceAnswer reads the answer to a one-partition Produce request
// of version v (3 to 8) into kafka-go's form of it, as RawProduce returns
// it.
func parseProduceAnswer(b []byte, v int16, topic string, partition int32) (*kafkago.ProduceResponse, error) {
	r := answerReader{b: b}
	if n := r.int32(); n != 1 {
		return nil, fmt.Errorf("%w: %d topics", errBadProduceAnswer, n)
	}
	if name := r.string(); r.err == nil && name != topic {
		return nil, fmt.Errorf("%w: topic %q, want %q", errBadProduceAnswer, name, topic)
	}
	if n := r.int32(); r.err == nil && n != 1 {
		return nil, fmt.Errorf("%w: %d partitions", errBadProduceAnswer, n)
	}
	if id := r.int32(); r.err == nil && id != partition {
		return nil, fmt.Errorf("%w: partition %d, want %d", errBadProduceAnswer, id, partition)
	}
	code := int16(r.int16())
	res := &kafkago.ProduceResponse{BaseOffset: r.int64()}
	if t := r.int64(); t >= 0 {
		res.LogAppendTime = time.UnixMilli(t)
	}
	if v >= 5 {
		res.LogStartOffset = r.int64()
	}
	message := ""
	if v >= 8 {
		n := r.int32()
		for i := int32(0); i < n && r.err == nil; i++ {
			index := r.int32()
			msg := r.nullableString()
			if res.RecordErrors == nil {
				res.RecordErrors = make(map[int]error)
			}
			res.RecordErrors[int(index)] = errors.New(msg)
		}
		message = r.nullableString()
	}
	res.Throttle = time.Duration(r.int32()) * time.Millisecond
	if r.err != nil {
		return nil, r.err
	}
	if code != 0 {
		res.Error = kafkago.Error(code)
		if message != "" {
			res.Error = fmt.Errorf("%w: %s", kafkago.Error(code), message)
		}
	}
	return res, nil
}

// answerReader reads the fields of an answer; the first read past its end
// sets err, and every later read returns zero.
type answerReader struct {
	b   []byte
	err error
}

func (r *answerReader) take(n int) []byte {
	if r.err != nil || n < 0 || len(r.b) < n {
		if r.err == nil {
			r.err = fmt.Errorf("%w: cut short", errBadProduceAnswer)
		}
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *answerReader) int16() uint16 {
	if p := r.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *answerReader) int32() int32 {
	if p := r.take(4); p != nil {
		return int32(binary.BigEndian.Uint32(p))
	}
	return 0
}

func (r *answerReader) int64() int64 {
	if p := r.take(8); p != nil {
		return int64(binary.BigEndian.Uint64(p))
	}
	return 0
}

func (r *answerReader) string() string {
	return string(r.take(int(int16(r.int16()))))
}

func (r *answerReader) nullableString() string {
	n := int16(r.int16())
	if n < 0 {
		return ""
	}
	return string(r.take(int(n)))
}

// rawProducer sends a partition's record batch, with its size, to the
// partition's leader and returns the answer as kafka-go's RawProduce
// would: produceConns, or a test's broker.
type rawProducer interface {
	rawProduce(deadline time.Time, p *partition, raw []byte) (*kafkago.ProduceResponse, error)
}

// rawProduce sends raw on one of the sink's produce connections to the
// partition's leader, within deadline. It runs in the partition's
// goroutine, which alone uses p.leader. A context is made only to look the
// leader up or to dial, which a request on a kept connection needs neither
// of: it would cost a timer per request.
func (cs *produceConns) rawProduce(deadline time.Time, p *partition, raw []byte) (*kafkago.ProduceResponse, error) {
	addr, c := p.leader, (*produceConn)(nil)
	if addr != "" {
		c = cs.idleConn(addr, time.Now())
	}
	if c == nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		var err error
		if addr, err = cs.leaderAddr(ctx, p); err != nil {
			return nil, err
		}
		if c, err = cs.get(ctx, addr); err != nil {
			p.leader = ""
			return nil, err
		}
	}
	res, err := c.produce(deadline, p.topic, int32(p.id), p.s.acks, raw)
	if err != nil {
		_ = c.nc.Close()
		p.leader = ""
		return nil, err
	}
	cs.put(c)
	if res != nil && res.Error != nil {
		// NOT_LEADER_OR_FOLLOWER above all: ask again next time.
		p.leader = ""
	}
	return res, nil
}

// leaderAddr is the address of p's leader, from the Transport's cached
// metadata when the partition does not know it.
func (cs *produceConns) leaderAddr(ctx context.Context, p *partition) (string, error) {
	if p.leader != "" {
		return p.leader, nil
	}
	md, err := cs.client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{p.topic}})
	if err != nil {
		return "", err
	}
	for _, t := range md.Topics {
		if t.Name != p.topic {
			continue
		}
		if t.Error != nil {
			return "", t.Error
		}
		for _, pt := range t.Partitions {
			if pt.ID != p.id {
				continue
			}
			if pt.Error != nil {
				return "", pt.Error
			}
			if pt.Leader.Host == "" || pt.Leader.ID < 0 {
				return "", kafkago.LeaderNotAvailable
			}
			p.leader = net.JoinHostPort(pt.Leader.Host, strconv.Itoa(pt.Leader.Port))
			return p.leader, nil
		}
	}
	return "", kafkago.UnknownTopicOrPartition
}
