package dispatch

import "time"

// held are the entries a shard's worker took whose events failed, in the
// order taken: one of each key, since a Write holds one event of each key
// and the later entries of a held key stay queued (shard.takeUntil skips
// them), where a full buffer folds them. They wait for their retry, with
// backoff, while the worker goes on with the shard's other keys: per-key
// order needs a key's earlier events first, nothing more, and one key that
// cannot be written (its Kafka partition's leader stopped answering, say)
// must not hold back every other key of its shard.
//
// Every held entry was taken from the shard before anything still queued
// there, so putting them back at the head in this order (shutdown) keeps
// each key's order.
type held struct {
	es   []*entry
	keys map[string]int // entries of each key in es or in a retry not yet settled
	// b paces the retries while anything fails; nil after a retry of the
	// head succeeded. due is when the head may be written again, and
	// failures counts the attempts in a row that failed, for the log.
	b        *backoff
	due      time.Time
	failures int
	// dead is set while the worker's latest attempt with new events had
	// none acknowledged: the sink is likely down, not one part of it, so
	// new events wait for the retries, one going with each, rather than
	// fail in a busy loop.
	dead bool
}

func newHeld() *held { return &held{keys: map[string]int{}} }

func (h *held) holds(key string) bool { return h.keys[key] > 0 }

// add holds e after everything held.
func (h *held) add(e *entry) {
	h.es = append(h.es, e)
	h.keys[e.key]++
}

// front moves up to n entries from the head onto buf for their retry.
// Their keys stay held until settle says how each fared, so that no newer
// entry of theirs leaves the queue meanwhile.
func (h *held) front(buf []*entry, n int) []*entry {
	n = min(n, len(h.es))
	buf = append(buf, h.es[:n]...)
	rest := copy(h.es, h.es[n:])
	clear(h.es[rest:])
	h.es = h.es[:rest]
	return buf
}

// settle releases the keys of tried, which front returned, and holds back,
// those of them that failed again, at the head again, in order.
func (h *held) settle(tried, back []*entry) {
	for _, e := range tried {
		h.release(e.key)
	}
	if len(back) == 0 {
		return
	}
	all := make([]*entry, 0, len(back)+len(h.es))
	h.es = append(append(all, back...), h.es...)
	for _, e := range back {
		h.keys[e.key]++
	}
}

// all empties h and returns what it held, in order.
func (h *held) all() []*entry {
	es := h.es
	h.es = nil
	clear(h.keys)
	return es
}

func (h *held) release(key string) {
	if h.keys[key]--; h.keys[key] <= 0 {
		delete(h.keys, key)
	}
}

// failed schedules the next retry of the head after an attempt failed:
// the first failure starts the backoff, and each failed retry of the head
// moves it on. A failure of new keys while the head waits leaves its
// schedule as it is.
func (h *held) failed(d *Dispatcher, retried bool, now time.Time) {
	h.failures++
	if h.b == nil {
		h.b = d.newBackoff()
	} else if !retried {
		return
	}
	h.due = now.Add(h.b.step())
}

// freshOK records that an attempt with new events had some acknowledged.
func (h *held) freshOK() { h.dead = false }

// retriedOK records that a retry of the head was acknowledged: what is
// still held goes next, at once.
func (h *held) retriedOK(now time.Time) {
	h.b, h.failures, h.due = nil, 0, now
}

// expired is a channel that is always ready: a take that must not wait.
var expired = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()
