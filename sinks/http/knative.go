package httpsink

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kubewire/kubewire/encoding"
)

// override is one extension of K_CE_OVERRIDES, prepared once: its name, its
// binary-mode header and the header's value, shared read-only by every
// request.
type override struct {
	name, value string
	header      string
	headerValue []string
}

// coreAttributes are the CloudEvents context attributes, which an override
// may not name: an extension of that name would be an attribute in
// structured mode and a clash in binary mode.
var coreAttributes = []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "data", "data_base64"}

// parseOverrides reads K_CE_OVERRIDES as Knative writes it:
// {"extensions": {"name": "value"}}. Other members are ignored, as
// Knative's adapters ignore them. An extension may not replace an attribute
// kubewire sets, since consumers rely on those (the partitionkey, the
// object's identity); the error says why, never the values.
func parseOverrides(s string) ([]override, error) {
	var o struct {
		Extensions map[string]string `json:"extensions"`
	}
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		return nil, errors.New(`must be JSON such as {"extensions": {"team": "shop"}}: ` + err.Error())
	}
	names := make([]string, 0, len(o.Extensions))
	for k := range o.Extensions {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]override, 0, len(names))
	for _, k := range names {
		switch {
		case !validExtensionName(k):
			return nil, fmt.Errorf("names extension %q: an extension name must be 1 to 20 lowercase letters and digits", k)
		case slices.Contains(coreAttributes, k):
			return nil, fmt.Errorf("names %q, a CloudEvents attribute, which an extension cannot replace", k)
		case slices.Contains(encoding.Extensions, k):
			return nil, fmt.Errorf("names %q, an extension of kubewire's event contract (docs/events.md), which consumers rely on", k)
		}
		v := o.Extensions[k]
		out = append(out, override{name: k, value: v,
			header: encoding.TextExtensionHeader(k), headerValue: []string{encoding.EncodeHeaderValue(v)}})
	}
	return out, nil
}

func validExtensionName(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9') }) < 0
}
