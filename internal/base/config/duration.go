package config

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// Duration is a time.Duration written in the file as a Go duration string
// such as "30s", "5m" or "1h30m". A bare 0 is also accepted.
//
// Decoding never fails: a value that is not a duration is remembered and
// reported by validation with its field path, so that one bad duration does
// not hide the other problems in the file.
type Duration struct {
	time.Duration

	// set reports that the value was given explicitly (in the file or with
	// NewDuration), so that an explicit 0 is not replaced by a default.
	set bool
	// invalid is the text of a value that is not a duration, and
	// invalidDetail says what is wrong with it; both are empty when valid.
	invalid       string
	invalidDetail string
}

// NewDuration returns d as an explicitly set Duration: defaulting leaves it
// alone even when it is zero.
func NewDuration(d time.Duration) Duration { return Duration{Duration: d, set: true} }

const durationExpectation = `must be a duration such as "30s", "5m" or "1h30m"`

// UnmarshalJSON implements json.Unmarshaler. It never returns an error; see
// the type's documentation.
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = Duration{}
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		// Same as omitting the field.
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			d.invalid, d.invalidDetail = string(b), durationExpectation
			return nil
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.invalid, d.invalidDetail = s, durationExpectation
			return nil
		}
		d.Duration, d.set = v, true
	case len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9')):
		if f, err := strconv.ParseFloat(string(b), 64); err == nil && f == 0 {
			d.Duration, d.set = 0, true
			return nil
		}
		d.invalid = string(b)
		d.invalidDetail = `a number without a unit is only allowed for 0; ` + durationExpectation
	default:
		d.invalid, d.invalidDetail = string(b), durationExpectation
	}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}
