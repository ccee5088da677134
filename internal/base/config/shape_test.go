package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/internal/base/config"
	"github.com/kubewire/kubewire/internal/base/shape"
	"github.com/kubewire/kubewire/internal/wiring/app"
)

// shapeBase watches Secrets, ConfigMaps and Events, with every shaping field
// set; the cases below break one thing each.
const shapeBase = `apiVersion: kubewire.io/v1alpha1
kind: Config
cluster: demo
resources:
  - version: v1
    resource: secrets
    namespaces: [payments]
    sinks: [out]
  - version: v1
    resource: configmaps
    filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"
    updates: changed
    ignorePaths: ["metadata.annotations['example.com/heartbeat']", "status.conditions[*].lastHeartbeatTime"]
    redact:
      - {path: "data['password']", mode: digest}
      - {path: "data.token", mode: remove}
    payload: diff
    sinks: [out]
  - group: events.k8s.io
    version: v1
    resource: events
    keyBy: involvedObject
    payload: reference
    sinks: [out]
sinks:
  - name: out
    type: stdout
`

func shapeEdit(t *testing.T, pairs ...string) string {
	t.Helper()
	s := shapeBase
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("shapeEdit: %q is not in the base config", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func TestTheShapingBaseConfigIsValidAndDefaulted(t *testing.T) {
	cfg, err := config.Parse([]byte(shapeBase), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Resources[0]
	if s.Updates != shape.UpdatesChanged || s.Payload != shape.PayloadFull || s.KeyBy != shape.KeyByObject {
		t.Errorf("defaults: updates %q payload %q keyBy %q", s.Updates, s.Payload, s.KeyBy)
	}
	rules, err := s.RedactRules()
	if err != nil || len(rules) != 3 {
		t.Errorf("secrets get the built-in rules: %v, %v", rules, err)
	}
	if ws := cfg.Warnings(); len(ws) != 0 {
		t.Errorf("warnings without allowSecretData: %v", ws)
	}
}

func TestBadShapingIsRejectedWithPathValueAndExpectation(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		path       string
		want       string
	}{
		{"a filter with a syntax error shows the position",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "object.metadata.name =="`),
			"resources[1].filter", `Invalid value: "object.metadata.name ==": must be a CEL expression over object, oldObject and type that yields a bool: line 1, column 24: Syntax error`},
		{"a filter that is not a bool",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "'x' + type"`),
			"resources[1].filter", "yields string; a filter must yield bool"},
		{"a filter that is a bare field, whose type is only known per object",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "object.metadata.name"`),
			"resources[1].filter", "yields dyn (a value whose type is only known at run time); a filter must yield bool: compare it, e.g. object.spec.paused == true"},
		{"a filter that picks one of two fields without comparing them",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "type == 'deleted' ? oldObject.metadata.name : object.metadata.name"`),
			"resources[1].filter", "yields dyn"},
		{"a filter with a type error",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "type == 1"`),
			"resources[1].filter", "line 1, column 6: found no matching overload for '_==_' applied to '(string, int)'"},
		{"a filter over an unknown variable",
			shapeEdit(t, `filter: "object.metadata.labels['team'] == 'payments' && type != 'deleted'"`, `filter: "request.userInfo.username == 'x'"`),
			"resources[1].filter", "undeclared reference to 'request'"},
		{"an unknown update mode",
			shapeEdit(t, "updates: changed", "updates: some"),
			"resources[1].updates", `Unsupported value: "some": supported values: "changed", "all", "generationChanged"`},
		{"ignorePaths without content comparison",
			shapeEdit(t, "updates: changed", "updates: generationChanged"),
			"resources[1].ignorePaths", `only applies with updates "changed"`},
		{"a malformed ignore path",
			shapeEdit(t, `"status.conditions[*].lastHeartbeatTime"`, `"status.conditions[0].lastHeartbeatTime"`),
			"resources[1].ignorePaths[1]", `Invalid value: "status.conditions[0].lastHeartbeatTime": must be a path of names, ['quoted keys'] and [*], such as "status.conditions[*].lastHeartbeatTime": at offset 17: expected [*], ['key'] or ["key"]`},
		{"a duplicate ignore path",
			shapeEdit(t, `"status.conditions[*].lastHeartbeatTime"`, `"metadata.annotations['example.com/heartbeat']"`),
			"resources[1].ignorePaths[1]", "Duplicate value"},
		{"an empty redact path",
			shapeEdit(t, `{path: "data.token", mode: remove}`, `{path: "", mode: remove}`),
			"resources[1].redact[1].path", "Required value"},
		{"an unknown redact mode",
			shapeEdit(t, "mode: remove", "mode: hide"),
			"resources[1].redact[1].mode", `Unsupported value: "hide": supported values: "digest", "remove"`},
		{"allowSecretData on something else than Secrets",
			shapeEdit(t, "    payload: diff\n", "    payload: diff\n    allowSecretData: true\n"),
			"resources[1].allowSecretData", "only applies to core/v1 secrets"},
		{"an unknown payload",
			shapeEdit(t, "payload: diff", "payload: patch"),
			"resources[1].payload", `Unsupported value: "patch"`},
		{"keyBy involvedObject on something else than Events",
			shapeEdit(t, "    payload: diff\n", "    payload: diff\n    keyBy: involvedObject\n"),
			"resources[1].keyBy", "only applies to Events"},
		{"an unknown keyBy",
			shapeEdit(t, "keyBy: involvedObject", "keyBy: owner"),
			"resources[2].keyBy", `Unsupported value: "owner"`},
		{"keyBy involvedObject into a Kafka sink with tombstones",
			shapeEdit(t, "    type: stdout\n", "    type: kafka\n    kafka: {brokers: [\"k:9092\"], topic: t}\n"),
			"resources[2].keyBy", "tombstones"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml), app.DefaultRegistry())
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *config.Error", err)
			}
			for _, fe := range ce.Errors {
				if fe.Field == tc.path && strings.Contains(fe.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("no error at %s containing %q in:\n%v", tc.path, tc.want, err)
		})
	}
}

func TestAllowSecretDataIsValidButWarned(t *testing.T) {
	cfg, err := config.Parse([]byte(shapeEdit(t, "    resource: secrets\n", "    resource: secrets\n    allowSecretData: true\n")), app.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.Warnings()
	if len(ws) != 1 || !strings.Contains(ws[0], "resources[0].allowSecretData: true") || !strings.Contains(ws[0], "unredacted") {
		t.Fatalf("warnings: %v", ws)
	}
	if rules, _ := cfg.Resources[0].RedactRules(); len(rules) != 0 {
		t.Fatalf("allowSecretData still redacts: %v", rules)
	}
}
