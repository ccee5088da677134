package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Error reports everything wrong with a configuration file: malformed YAML,
// unknown or duplicate fields, values of the wrong type and failed
// validation. Each entry of Errors names the field path, the bad value and
// what was expected. An entry whose Field is empty concerns the file as a
// whole (for example malformed YAML); its Detail says what is wrong.
type Error struct {
	// File is the path the configuration was loaded from; empty for Parse.
	File string
	// Errors lists every problem found, in the order found.
	Errors field.ErrorList
}

// Error prints one problem per line, each prefixed with the file name when
// it is known.
func (e *Error) Error() string {
	var b strings.Builder
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.File != "" {
			b.WriteString(e.File)
			b.WriteString(": ")
		}
		if fe.Field == "" {
			b.WriteString(fe.Detail)
		} else {
			b.WriteString(fe.Error())
		}
	}
	return b.String()
}

// Unwrap returns the individual *field.Error values.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, fe := range e.Errors {
		errs[i] = fe
	}
	return errs
}

// fileError is a problem with the file as a whole rather than one field.
func fileError(detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, BadValue: field.OmitValueType{}, Detail: detail}
}
