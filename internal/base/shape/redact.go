package shape

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Redaction modes.
const (
	// RedactDigest replaces a value by "sha256:<hex>", so a consumer sees
	// that it changed without seeing it.
	RedactDigest = "digest"
	// RedactRemove deletes the field.
	RedactRemove = "remove"
)

// RedactModes lists the modes a rule may use.
func RedactModes() []string { return []string{RedactDigest, RedactRemove} }

// LastAppliedAnnotation holds the whole manifest kubectl applied, Secret
// values included, so it is removed from Secrets.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// Rule redacts the fields at Path.
type Rule struct {
	Path Path
	Mode string
	// base64 digests the decoded bytes of a base64 string (Secret data), so
	// the digest is the sha256 of the secret value itself, checkable with
	// sha256sum.
	base64 bool
}

// SecretRules are the rules every core/v1 Secret gets unless the config
// says allowSecretData.
func SecretRules() []Rule {
	return []Rule{
		{Path: Path{{Key: "data"}, {Any: true}}, Mode: RedactDigest, base64: true},
		{Path: Path{{Key: "stringData"}, {Any: true}}, Mode: RedactDigest},
		{Path: Path{{Key: "metadata"}, {Key: "annotations"}, {Key: LastAppliedAnnotation}}, Mode: RedactRemove},
	}
}

// Redact applies rules to obj in place.
func Redact(obj map[string]any, rules []Rule) {
	for i := range rules {
		redactIn(obj, rules[i].Path, &rules[i])
	}
}

// redactIn applies r below v at p and returns what replaces v, or false
// when v itself is removed.
func redactIn(v any, p Path, r *Rule) (any, bool) {
	if len(p) == 0 {
		if r.Mode == RedactRemove {
			return nil, false
		}
		return digest(v, r.base64), true
	}
	s := p[0]
	switch c := v.(type) {
	case map[string]any:
		if !s.Any {
			if x, ok := c[s.Key]; ok {
				setOrDelete(c, s.Key, x, p[1:], r)
			}
			return v, true
		}
		for k, x := range c {
			setOrDelete(c, k, x, p[1:], r)
		}
	case []any:
		if !s.Any {
			return v, true
		}
		out := c[:0]
		for _, x := range c {
			if nv, keep := redactIn(x, p[1:], r); keep {
				out = append(out, nv)
			}
		}
		clear(c[len(out):])
		return out, true
	}
	return v, true
}

func setOrDelete(m map[string]any, k string, x any, rest Path, r *Rule) {
	if nv, keep := redactIn(x, rest, r); keep {
		m[k] = nv
	} else {
		delete(m, k)
	}
}

const digestPrefix = "sha256:"

// digest returns the "sha256:<hex>" digest of v: of a string's bytes (of the
// decoded bytes if b64), of the JSON encoding of anything else. A value that
// is already a digest is returned as it is, so the transform stays
// idempotent.
func digest(v any, b64 bool) string {
	var data []byte
	switch s := v.(type) {
	case string:
		if isDigest(s) {
			return s
		}
		data = []byte(s)
		if b64 {
			if d, err := base64.StdEncoding.DecodeString(s); err == nil {
				data = d
			}
		}
	default:
		data, _ = json.Marshal(v)
	}
	sum := sha256.Sum256(data)
	return digestPrefix + hex.EncodeToString(sum[:])
}

func isDigest(s string) bool {
	if len(s) != len(digestPrefix)+64 || !strings.HasPrefix(s, digestPrefix) {
		return false
	}
	for _, c := range s[len(digestPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
