package sinks_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/kubewire/kubewire/sinks"
)

func TestTooLargeMarksAnErrorWithoutChangingItsMessageOrHidingIt(t *testing.T) {
	broker := fmt.Errorf("produce: %w", fs.ErrInvalid) // stands for a broker's own error
	err := sinks.Permanent(fmt.Errorf("event e1: %w", sinks.TooLarge(broker)))
	if !errors.Is(err, sinks.ErrTooLarge) || !errors.Is(err, sinks.ErrPermanent) || !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("%v: want ErrTooLarge, ErrPermanent and the broker's error all reachable", err)
	}
	if got, want := sinks.TooLarge(broker).Error(), broker.Error(); got != want {
		t.Errorf("TooLarge(err).Error() = %q, want err's message %q", got, want)
	}
	if sinks.TooLarge(nil) != nil {
		t.Error("TooLarge(nil) is not nil")
	}
	if errors.Is(broker, sinks.ErrTooLarge) {
		t.Error("an unmarked error is ErrTooLarge")
	}
}
