package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TLS is the tls block of a sink whose client verifies its server: the
// Kafka brokers, an HTTP receiver. Setting the block turns TLS on.
type TLS struct {
	// CAFile holds the PEM certificates that verify the server. Default:
	// the system roots.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile hold the client certificate and key, for mutual
	// TLS. Both or neither.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name verified in the server's certificate.
	ServerName string `json:"serverName,omitempty"`
	// InsecureSkipVerify turns off certificate verification. Only for
	// tests: anyone on the path can then read and forge the stream.
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// Validate checks the block at p: a certificate goes with its key, and
// skipping verification contradicts what only verification uses.
func (t *TLS) Validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if (t.CertFile == "") != (t.KeyFile == "") {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("certFile=%q keyFile=%q", t.CertFile, t.KeyFile),
			"certFile and keyFile must be set together (client certificate and its key) or not at all"))
	}
	if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		errs = append(errs, field.Forbidden(p.Child("insecureSkipVerify"),
			"contradicts caFile and serverName, which only matter when certificates are verified; remove one or the other"))
	}
	return errs
}

// Files lists the block's files, at p.
func (t *TLS) Files(p *field.Path) []FileRef {
	refs := AddFile(nil, p.Child("caFile"), t.CAFile)
	refs = AddFile(refs, p.Child("certFile"), t.CertFile)
	return AddFile(refs, p.Child("keyFile"), t.KeyFile)
}
