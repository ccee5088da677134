// Package secretfile reads the secrets that sink configs name by file: a
// password, a token, an auth header. Every sink reads them the same way,
// and no error ever holds a secret's value.
package secretfile

import (
	"fmt"
	"os"
	"strings"
)

// Read returns the content of the file at path without its trailing line
// ending ("\n", "\r\n" or several), as files written by editors and
// `kubectl create secret --from-file` end with one. field is the config's
// field path (sasl.passwordFile), for the error; an error names the field
// and the path, never the content. An empty secret is the caller's to
// refuse or accept.
func Read(field, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
