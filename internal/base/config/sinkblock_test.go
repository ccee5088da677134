package config

import (
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/testing/testkit"
)

// The sink block mechanics, with stand-in types (sinktypes_test.go): what
// every sink package's block gets from config without writing it itself.
func TestSinkBlocksAreDecodedStrictlyWithFullPaths(t *testing.T) {
	const head = "apiVersion: kubewire.io/v1alpha1\nkind: Config\ncluster: c\nresources:\n  - {version: v1, resource: configmaps, sinks: [s]}\n  - {version: v1, resource: secrets, sinks: [s]}\nsinks:\n  - name: s\n"
	cases := []struct {
		name, sink string
		want       []string
	}{
		{"A required block that is left out is reported once, at the block.", "    type: needy\n",
			[]string{"sinks[0].needy: Required value: a needy block with servers"}},
		{"A field of the wrong type is reported at its full path.", "    type: needy\n    needy: {servers: 5}\n",
			[]string{"sinks[0].needy.servers: Invalid value: 5: must be a list"}},
		{"An unknown field in a block is reported at its full path.", "    type: needy\n    needy: {servers: [a], sever: b}\n",
			[]string{"sinks[0].needy.sever: Forbidden: unknown field"}},
		{"A block of another type is refused.", "    type: stdout\n    needy: {servers: [a]}\n",
			[]string{`sinks[0].needy: Forbidden: may only be set when type is "needy" (type is "stdout")`}},
		{"A block of no known type is an unknown field.", "    type: stdout\n    pulsar: {}\n",
			[]string{"sinks[0].pulsar: Forbidden: unknown field"}},
		{"An explicit 0 reaches the block's ExplicitZeros.", "    type: needy\n    needy: {servers: [a], batch: 0}\n",
			[]string{"sinks[0].needy.batch: Invalid value: 0: omit the field for the default (100)"}},
		{"Validate sees the resources routed to the sink.", "    type: needy\n    needy: {servers: [a]}\n",
			[]string{"resources[1].resource: Forbidden: needy sinks take no secrets"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(head+c.sink), testTypes{})
			testkit.ErrorSays(t, err, c.want...)
			if strings.Count(err.Error(), "\n") > len(c.want)+1 {
				t.Errorf("more errors than expected:\n%s", err)
			}
		})
	}
}

func TestASinkBlockIsDefaultedAfterValidation(t *testing.T) {
	cfg, err := Parse([]byte("apiVersion: kubewire.io/v1alpha1\nkind: Config\ncluster: c\nresources:\n  - {version: v1, resource: configmaps, sinks: [s]}\nsinks:\n  - {name: s, type: needy, needy: {servers: [a]}}\n"), testTypes{})
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := cfg.Sinks[0].Block.(*testNeedy); !ok || b.Batch != 100 || b.Servers[0] != "a" {
		t.Errorf("block = %#v, want servers [a] and the default batch 100", cfg.Sinks[0].Block)
	}
}
