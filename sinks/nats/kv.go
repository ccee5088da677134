package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kubewire/kubewire/encoding"
	"github.com/kubewire/kubewire/sinks"
)

// The key-value live view (jetstream.kv): besides the stream, the sink keeps
// a bucket in which each object's key holds the object's latest event, as
// structured CloudEvent JSON, whatever the stream's content mode. A delete
// deletes the key (a delete marker), and a complete snapshot deletes the keys
// of its resource that had no event since it started, so the bucket holds
// what the cluster holds. Snapshot markers themselves are not stored.

// kvHeaderOp and kvOpDelete are how a JetStream key-value delete marker is
// written (what jetstream.KeyValue.Delete sends).
const (
	kvHeaderOp = "KV-Operation"
	kvOpDelete = "DEL"
)

// tokenEmptyKV stands for an empty segment of a partition key: escaped
// segments never start with "_", so it meets none of them.
const tokenEmptyKV = "_empty"

// KVKey maps an event's partition key (`<resource>[.<group>]/<namespace>/
// <name>`) to its key in the bucket, injectively: every "/"-separated
// segment becomes EscapeToken of it with "~" written "=" (a bucket key may
// hold only letters, digits and "-_=./"), and the segments are joined by
// ".". "configmaps/shop/web" is "configmaps.shop.web" and
// "widgets.demo.io/shop/kube-root-ca.crt" is
// "widgets_demo_io.shop.kube-root-ca_crt". An escaped segment holds no "."
// and no "=" that does not start an escape, so PartitionKeyOfKV reverses it
// and two partition keys never share a bucket key. Each resource's keys start
// with its escaped resource and a ".", so a watch of "configmaps.>" sees one
// resource, and "configmaps.shop.*" one namespace.
func KVKey(partitionKey string) string {
	segs := strings.Split(partitionKey, "/")
	for i, s := range segs {
		if s == "" {
			segs[i] = tokenEmptyKV
			continue
		}
		segs[i] = strings.ReplaceAll(EscapeToken(s), "~", "=")
	}
	return strings.Join(segs, ".")
}

// PartitionKeyOfKV returns the partition key that KVKey mapped to key.
func PartitionKeyOfKV(key string) (string, error) {
	segs := strings.Split(key, ".")
	for i, s := range segs {
		if s == tokenEmptyKV {
			segs[i] = ""
			continue
		}
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			switch c := s[j]; {
			case c == '_':
				b.WriteByte('.')
			case c == '=':
				if j+2 >= len(s) {
					return "", fmt.Errorf("nats: bucket key %q: a truncated escape", key)
				}
				c, err := strconv.ParseUint(s[j+1:j+3], 16, 8)
				if err != nil {
					return "", fmt.Errorf("nats: bucket key %q: a bad escape", key)
				}
				b.WriteByte(byte(c))
				j += 2
			default:
				b.WriteByte(c)
			}
		}
		segs[i] = b.String()
	}
	return strings.Join(segs, "/"), nil
}

// ErrKVWatchEnded is NextKVEntry's error for a watch that ended.
var ErrKVWatchEnded = errors.New("nats: the key-value watch ended")

// NextKVEntry waits for the next entry of a key-value watch: for the sink's
// pruning of the bucket, and for readers of the bucket. A nil entry says
// that every key the bucket held when the watch began was delivered. It
// returns ErrKVWatchEnded once the watch ended, and ctx's error if ctx ends
// first.
func NextKVEntry(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, error) {
	select {
	case e, open := <-w.Updates():
		if !open {
			return nil, ErrKVWatchEnded
		}
		return e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// openKV creates or updates the bucket when the config says so, else binds
// to the existing one.
func openKV(ctx context.Context, js jetstream.JetStream, kv *KV, timeout time.Duration) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !kv.Create {
		b, err := js.KeyValue(ctx, kv.Bucket)
		if err != nil {
			return nil, fmt.Errorf("nats: key-value bucket %q (jetstream.kv.create is false, so it must exist): %w", kv.Bucket, err)
		}
		return b, nil
	}
	storage := jetstream.FileStorage
	if kv.Storage == StorageMemory {
		storage = jetstream.MemoryStorage
	}
	b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: kv.Bucket, History: 1, Storage: storage, Replicas: kv.Replicas,
		Description: "kubewire: each object's latest event, by object key",
	})
	if err != nil {
		return nil, fmt.Errorf("nats: create or update key-value bucket %q: %w", kv.Bucket, err)
	}
	return b, nil
}

// kvWindowKey names an open snapshot of one resource.
type kvWindowKey struct{ resource, snapshotID string }

// writeKV brings the bucket up to date with the events of a batch the
// stream has taken, in the batch's order: a put for every object event, a
// delete marker for every delete. A snapshot.started marker notes the
// bucket's last revision (everything of its resource before the marker is
// in the bucket by then, markers being barriers of their resource); a
// complete snapshot.completed deletes the keys of its resource whose
// revision is not newer. A gap changes nothing in the bucket: the snapshot
// that follows it does.
//
// An event whose bucket write fails fails in o, and so does every later
// event of its key (holdBack): the bucket's writes are many in flight at
// once, so a later put of a key may have landed before an earlier one
// failed, and the dispatcher writes it again after that one, so that the
// key ends at its newest value. Its stream message is deduplicated by
// Nats-Msg-Id. A completed marker prunes nothing if anything before it in
// the batch failed: the key of a failed put would look stale.
func (s *Sink) writeKV(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, events []*encoding.Event, o *outcomes) {
	prefix := "$KV." + s.cfg.JetStream.KV.Bucket + "."
	var msgs []*natsgo.Msg
	var owner []int // the event of each of msgs
	flush := func() {
		for j, err := range s.publishAll(ctx, js, msgs) {
			if err != nil {
				o.fail(owner[j], err)
			}
		}
		msgs, owner = msgs[:0], owner[:0]
	}
	for i, ev := range events {
		if o.failed(i) {
			continue // the stream did not take it
		}
		key := ev.Extension(encoding.ExtPartitionKey)
		switch ev.Type() {
		case encoding.TypeAdded, encoding.TypeUpdated, encoding.TypeSynced:
			m, err := s.kvPut(prefix+KVKey(key), ev)
			if err != nil {
				o.fail(i, err)
				continue
			}
			msgs, owner = append(msgs, m), append(owner, i)
		case encoding.TypeDeleted:
			m := natsgo.NewMsg(prefix + KVKey(key))
			m.Header.Set(kvHeaderOp, kvOpDelete)
			msgs, owner = append(msgs, m), append(owner, i)
		case encoding.TypeSnapshotStarted, encoding.TypeSnapshotCompleted:
			flush()
			sid := ev.Extension(encoding.ExtSnapshotID)
			wk := kvWindowKey{key, sid}
			if ev.Type() == encoding.TypeSnapshotStarted {
				last, err := kvLastRevision(ctx, kv)
				if err != nil {
					o.fail(i, err)
					continue
				}
				s.kvMu.Lock()
				s.kvWindows[wk] = last
				s.kvMu.Unlock()
				continue
			}
			if o.failedBefore(i) {
				o.fail(i, fmt.Errorf("nats: snapshot %s of %s: an event before it failed, so nothing is pruned yet: %w", sid, key, sinks.ErrNotSent))
				continue
			}
			s.kvMu.Lock()
			start, ok := s.kvWindows[wk]
			s.kvMu.Unlock()
			if _, incomplete := ev.Lookup(encoding.ExtIncomplete); ok && !incomplete {
				if err := s.kvPrune(ctx, js, kv, prefix, key, start); err != nil {
					o.fail(i, err)
					continue
				}
			}
			s.kvMu.Lock()
			delete(s.kvWindows, wk)
			s.kvMu.Unlock()
		}
	}
	flush()
	o.holdBack(events)
}

// kvPut is the put of ev's structured JSON at subject. An event larger than
// the server's max_payload is put as its reference event, as the stream
// does; one that is still too large is refused permanently.
func (s *Sink) kvPut(subject string, ev *encoding.Event) (*natsgo.Msg, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, sinks.Permanent(fmt.Errorf("nats: event %s: %w", ev.ID(), err))
	}
	max := int64(-1)
	s.mu.Lock()
	if s.nc != nil {
		max = s.nc.MaxPayload()
	}
	s.mu.Unlock()
	if max > 0 && int64(len(body)+len(subject)) > max {
		ref, rerr := encoding.ReferenceEvent(ev)
		if rerr == nil {
			body, rerr = json.Marshal(ref)
		}
		if rerr != nil || int64(len(body)+len(subject)) > max {
			return nil, sinks.Permanent(sinks.TooLarge(fmt.Errorf("nats: event %s is too large for the key-value bucket even as a reference", ev.ID())))
		}
	}
	return &natsgo.Msg{Subject: subject, Data: body, Header: natsgo.Header{}}, nil
}

// kvLastRevision is the last revision the bucket has stored.
func kvLastRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("nats: status of key-value bucket %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("nats: status of key-value bucket %s: no stream information", kv.Bucket())
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// kvPrune deletes the keys of resource whose revision is start or older:
// the keys that had no event since the snapshot started.
func (s *Sink) kvPrune(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, prefix, resource string, start uint64) error {
	w, err := kv.Watch(ctx, KVKey(resource)+".>", jetstream.MetaOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("nats: list keys of %s in bucket %s: %w", resource, kv.Bucket(), err)
	}
	defer w.Stop()
	var stale []*natsgo.Msg
	for {
		e, err := NextKVEntry(ctx, w)
		if errors.Is(err, ErrKVWatchEnded) {
			return fmt.Errorf("nats: list keys of %s in bucket %s: the watch ended", resource, kv.Bucket())
		}
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Revision() <= start {
			m := natsgo.NewMsg(prefix + e.Key())
			m.Header.Set(kvHeaderOp, kvOpDelete)
			stale = append(stale, m)
		}
	}
	for _, err := range s.publishAll(ctx, js, stale) {
		if err != nil {
			return err
		}
	}
	return nil
}

// publishAll publishes msgs in order within the sink's window of pending
// acknowledgements, and returns nil once every one has its PubAck, else
// each message's failure (nil where acknowledged). After the first failure
// nothing new is published.
func (s *Sink) publishAll(ctx context.Context, js jetstream.JetStream, msgs []*natsgo.Msg) []error {
	if len(msgs) == 0 {
		return nil
	}
	results := make(chan result, len(msgs))
	errs := make([]error, len(msgs))
	acked := make([]bool, len(msgs))
	inFlight, failures := 0, 0
	stallAfter := 2 * s.cfg.PublishTimeout.Duration
	stall := time.NewTimer(stallAfter)
	defer stall.Stop()
	failed := func(j int, err error) {
		errs[j] = fmt.Errorf("nats: key-value write to %s: %w", msgs[j].Subject, err)
		failures++
	}
	// rest fails every message neither acknowledged nor failed yet.
	rest := func(err error) []error {
		for j := range msgs {
			if !acked[j] && errs[j] == nil {
				failed(j, err)
			}
		}
		return errs
	}
	next := 0
	for next < len(msgs) && failures == 0 || inFlight > 0 {
		var admit chan struct{}
		if next < len(msgs) && failures == 0 {
			admit = s.window
		}
		select {
		case admit <- struct{}{}:
			if err := s.publishAsync(js, msgs[next], results, next); err != nil {
				failed(next, err)
			} else {
				inFlight++
			}
			next++
		case r := <-results:
			inFlight--
			stall.Reset(stallAfter)
			if r.err != nil {
				failed(r.index, tooLarge(r.err))
			} else {
				acked[r.index] = true
			}
		case <-ctx.Done():
			return rest(fmt.Errorf("no PubAck yet: %w", ctx.Err()))
		case <-stall.C:
			return rest(fmt.Errorf("no PubAck yet, and no progress for %s", stallAfter))
		}
	}
	if failures == 0 {
		return nil
	}
	return rest(fmt.Errorf("a write before it failed: %w", sinks.ErrNotSent))
}
