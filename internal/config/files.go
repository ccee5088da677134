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
	add := func(p *field.Path, path string) {
		if path != "" {
			refs = append(refs, FileRef{Field: p, Path: path})
		}
	}
	for i := range c.Sinks {
		sp := field.NewPath("sinks").Index(i)
		if k := c.Sinks[i].Kafka; k != nil {
			kp := sp.Child("kafka")
			if t := k.TLS; t != nil {
				add(kp.Child("tls", "caFile"), t.CAFile)
				add(kp.Child("tls", "certFile"), t.CertFile)
				add(kp.Child("tls", "keyFile"), t.KeyFile)
			}
			if s := k.SASL; s != nil {
				add(kp.Child("sasl", "passwordFile"), s.PasswordFile)
			}
		}
		if n := c.Sinks[i].NATS; n != nil {
			np := sp.Child("nats")
			if t := n.TLS; t != nil {
				add(np.Child("tls", "caFile"), t.CAFile)
				add(np.Child("tls", "certFile"), t.CertFile)
				add(np.Child("tls", "keyFile"), t.KeyFile)
			}
			if a := n.Auth; a != nil {
				add(np.Child("auth", "credsFile"), a.CredsFile)
				add(np.Child("auth", "nkeySeedFile"), a.NkeySeedFile)
				add(np.Child("auth", "passwordFile"), a.PasswordFile)
				add(np.Child("auth", "tokenFile"), a.TokenFile)
			}
		}
	}
	return refs
}
