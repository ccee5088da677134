package config

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// What sink blocks share: content modes and the checks their Validate
// methods build on, so that every sink words the same problem the same way.

// CloudEvents content modes.
const (
	// ContentModeBinary puts the attributes in ce- headers and the data in
	// the body.
	ContentModeBinary = "binary"
	// ContentModeStructured puts the whole event, as JSON, in the body.
	ContentModeStructured = "structured"
)

// envName is what a portable environment variable name looks like.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether s can name an environment variable portably.
func ValidEnvName(s string) bool { return envName.MatchString(s) }

// QuoteAll quotes each value and joins them with ", ", for messages that
// list what is allowed.
func QuoteAll(vs []string) string { return quoteAll(vs) }

// ValidateDuration reports a value that could not be read as a duration at
// all, or nil.
func ValidateDuration(p *field.Path, d Duration) *field.Error { return validateDurationSyntax(p, d) }

// ValidateLabel reports a value that is not a DNS-1123 label.
func ValidateLabel(p *field.Path, v string) field.ErrorList { return validateLabel(p, v) }

// validatePositiveDuration accepts an unset duration (it takes a default)
// and any duration greater than zero.
func ValidatePositiveDuration(p *field.Path, d Duration) field.ErrorList {
	if bad := validateDurationSyntax(p, d); bad != nil {
		return field.ErrorList{bad}
	}
	if d.set && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.String(), "must be greater than 0; omit the field for the default")}
	}
	return nil
}

// IsSet reports whether the duration was given explicitly, 0 included.
func (d Duration) IsSet() bool { return d.set }

// ValidateRange reports v outside lo..hi.
func ValidateRange(p *field.Path, v, lo, hi int) field.ErrorList { return validateRange(p, v, lo, hi) }
