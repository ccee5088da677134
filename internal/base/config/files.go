package config

import "k8s.io/apimachinery/pkg/util/validation/field"

// FileRef is a file the configuration names, with the field that names it.
type FileRef struct {
	// Field is the field path, such as sinks[0].kafka.tls.caFile.
	Field *field.Path
	// Path is the file's path as written.
	Path string
}

// Files lists every file the sinks read at connect time (TLS certificates
// and keys, passwords, tokens, NATS credentials and nkey seeds), in the
// order of the configuration. Unset fields are left out. It reads nothing:
// `kubewire validate --kubeconfig` checks that each exists.
func (c *Config) Files() []FileRef {
	var refs []FileRef
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if f, ok := s.Block.(interface{ Files(*field.Path) []FileRef }); ok {
			refs = append(refs, f.Files(field.NewPath("sinks").Index(i).Child(s.Type))...)
		}
	}
	return refs
}

// AddFile appends a FileRef for path to refs, unless path is empty; for
// sink blocks' Files.
func AddFile(refs []FileRef, p *field.Path, path string) []FileRef {
	if path == "" {
		return refs
	}
	return append(refs, FileRef{Field: p, Path: path})
}
