package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/sinks"
)

func TestABatchErrorNamesEachFailedEventAndAcknowledgesTheRest(t *testing.T) {
	down := errors.New("broker down")
	be := sinks.NewBatchError(5).
		Failed(1, down).
		Failed(3, sinks.Permanent(sinks.TooLarge(errors.New("record too large"))))
	if be.Len() != 5 || be.Failures() != 2 {
		t.Fatalf("Len %d, Failures %d; want 5 and 2", be.Len(), be.Failures())
	}
	for i, want := range []error{nil, down, nil, sinks.ErrPermanent, nil} {
		got := be.Err(i)
		if (got == nil) != (want == nil) || want != nil && !errors.Is(got, want) {
			t.Errorf("Err(%d) = %v, want %v", i, got, want)
		}
		if got := sinks.ItemError(be, i); (got == nil) != (want == nil) {
			t.Errorf("ItemError(be, %d) = %v, want %v", i, got, want)
		}
		wrapped := fmt.Errorf("adapter: %w", be)
		if got := sinks.ItemError(wrapped, i); (got == nil) != (want == nil) {
			t.Errorf("ItemError of a wrapped BatchError, %d = %v, want %v", i, got, want)
		}
	}
	if !errors.Is(be, sinks.ErrPermanent) || !errors.Is(be, sinks.ErrTooLarge) || !errors.Is(be, down) {
		t.Errorf("errors.Is does not see the failures of %v", be)
	}
	if errors.Is(sinks.NewBatchError(2).Failed(0, down), sinks.ErrPermanent) {
		t.Error("a batch of transient failures is ErrPermanent")
	}
}

func TestABatchErrorWithoutFailuresIsNoError(t *testing.T) {
	if err := sinks.NewBatchError(3).ErrorOrNil(); err != nil {
		t.Fatalf("ErrorOrNil of a batch without failures = %v, want nil", err)
	}
	if err := sinks.NewBatchError(3).Failed(2, nil).ErrorOrNil(); err != nil {
		t.Fatalf("Failed(i, nil) made the batch fail: %v", err)
	}
	be := sinks.NewBatchError(3).Failed(2, context.Canceled)
	if err := be.ErrorOrNil(); err != be {
		t.Fatalf("ErrorOrNil = %v, want the BatchError itself", err)
	}
}

func TestAPlainErrorSpeaksForEveryEvent(t *testing.T) {
	down := errors.New("broker down")
	for i := range 3 {
		if got := sinks.ItemError(down, i); got != down {
			t.Errorf("ItemError(plain, %d) = %v, want the plain error", i, got)
		}
	}
	if sinks.ItemError(nil, 0) != nil {
		t.Error("ItemError(nil, 0) is not nil")
	}
}

func TestABatchErrorsMessageCountsTheFailuresAndShowsTheFirstFew(t *testing.T) {
	be := sinks.NewBatchError(10)
	for i := 2; i < 8; i++ {
		be.Failed(i, fmt.Errorf("reason %d", i))
	}
	msg := be.Error()
	for _, want := range []string{"6 of 10 events failed", "event 2: reason 2", "event 4: reason 4", "and 3 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "reason 5") {
		t.Errorf("message %q spells out more than the first three failures", msg)
	}
}

func TestRecordingAFailureTwiceCountsTheEventOnce(t *testing.T) {
	be := sinks.NewBatchError(2).Failed(0, errors.New("first")).Failed(0, errors.New("second"))
	if be.Failures() != 1 || be.Err(0).Error() != "second" {
		t.Fatalf("Failures %d, Err(0) %v; want 1 and the later reason", be.Failures(), be.Err(0))
	}
}
