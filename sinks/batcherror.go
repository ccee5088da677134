package sinks

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotSent marks an event that a Write did not send because something
// before it failed: an earlier event of its key, which it must not overtake,
// or the connection. The event is retried like any transient failure.
var ErrNotSent = errors.New("not sent")

// BatchError is the outcome of a Write in which some events failed: it
// names each failed event by its index in the Write's slice, with its own
// reason, and every event it does not name was acknowledged. A reason that
// wraps ErrPermanent refuses that event for good; any other reason is
// transient.
//
// errors.Is and errors.As on a BatchError ask about its failures: whether
// any of them is, say, ErrPermanent. A caller that acts on the outcome
// looks at each event with Err.
type BatchError struct {
	n      int
	errs   []error // len n once an event failed; nil entries were acknowledged
	failed int
}

// NewBatchError returns the outcome of a Write of n events in which no
// event has failed yet.
func NewBatchError(n int) *BatchError { return &BatchError{n: n} }

// Failed records that the event at index i failed with err, replacing what
// was recorded for it before, and returns e. A nil err changes nothing.
func (e *BatchError) Failed(i int, err error) *BatchError {
	if err == nil {
		return e
	}
	if i < 0 || i >= e.n {
		panic(fmt.Sprintf("sinks: BatchError.Failed(%d) in a batch of %d events", i, e.n))
	}
	if e.errs == nil {
		e.errs = make([]error, e.n)
	}
	if e.errs[i] == nil {
		e.failed++
	}
	e.errs[i] = err
	return e
}

// Len is the number of events in the Write.
func (e *BatchError) Len() int { return e.n }

// Failures is the number of events that failed.
func (e *BatchError) Failures() int { return e.failed }

// Err is the reason the event at index i failed, or nil if it was
// acknowledged.
func (e *BatchError) Err(i int) error {
	if e.errs == nil {
		return nil
	}
	return e.errs[i]
}

// ErrorOrNil is e if an event failed, else nil: what Write returns.
func (e *BatchError) ErrorOrNil() error {
	if e == nil || e.failed == 0 {
		return nil
	}
	return e
}

// shownFailures is how many failures Error spells out; a disconnect fails a
// whole batch at once, and one reason repeated a hundred times helps no one.
const shownFailures = 3

func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d events failed", e.failed, e.n)
	shown := 0
	for i, err := range e.errs {
		if err == nil {
			continue
		}
		if shown == shownFailures {
			fmt.Fprintf(&b, "; and %d more", e.failed-shown)
			break
		}
		sep := "; "
		if shown == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%sevent %d: %v", sep, i, err)
		shown++
	}
	return b.String()
}

// Unwrap returns the failures, so that errors.Is and errors.As look at
// each of them.
func (e *BatchError) Unwrap() []error {
	out := make([]error, 0, e.failed)
	for _, err := range e.errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// ItemError is what err, the result of a Write, says of the event at index
// i: nil if the broker acknowledged it. A BatchError (found with errors.As)
// speaks for each event it covers; any other error for all of them.
func ItemError(err error, i int) error {
	if err == nil {
		return nil
	}
	var be *BatchError
	if errors.As(err, &be) && i < be.Len() {
		return be.Err(i)
	}
	return err
}
