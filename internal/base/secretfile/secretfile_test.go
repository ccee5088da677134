package secretfile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/secretfile"
)

func TestASecretIsTheFilesContentWithoutItsTrailingLineEnding(t *testing.T) {
	cases := []struct{ name, content, want string }{
		{"A file without a line ending is read as it is.", "s3cret", "s3cret"},
		{"A trailing newline is dropped.", "s3cret\n", "s3cret"},
		{"A trailing CRLF is dropped.", "s3cret\r\n", "s3cret"},
		{"Several trailing line endings are dropped.", "s3cret\n\n", "s3cret"},
		{"Inner and leading whitespace is kept.", " s3 cret\t\n", " s3 cret\t"},
		{"An empty file is an empty secret.", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := secretfile.Read("auth.tokenFile", path)
			if err != nil || got != c.want {
				t.Errorf("Read = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestAnUnreadableSecretFileNamesTheFieldAndThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing")
	_, err := secretfile.Read("sasl.passwordFile", path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "sasl.passwordFile: ") || !strings.Contains(err.Error(), path) {
		t.Errorf("Read = %v; want an fs.ErrNotExist naming sasl.passwordFile and %s", err, path)
	}
}
