package shape

import (
	"fmt"
	"testing"
)

// benchPod is a Pod of realistic size as the cache holds it.
func benchPod(b *testing.B, rv int, ready string) map[string]any {
	var containers, statuses string
	for i := range 3 {
		if i > 0 {
			containers += ","
			statuses += ","
		}
		containers += fmt.Sprintf(`{"name":"c%d","image":"registry.example.com/team/app-%d:1.2.3","ports":[{"containerPort":%d,"protocol":"TCP"}],
			"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"resources":{"limits":{"cpu":"500m","memory":"256Mi"}}}`, i, i, 8080+i)
		statuses += fmt.Sprintf(`{"name":"c%d","ready":true,"restartCount":0,"image":"registry.example.com/team/app-%d:1.2.3","state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}`, i, i)
	}
	return decode(b, fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"team-payments","uid":"0b3c","resourceVersion":"%d",
		"labels":{"app":"web","team":"payments","pod-template-hash":"abc123"},"annotations":{"example.com/x":"1"},
		"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-abc123","uid":"9f","controller":true}]},
		"spec":{"nodeName":"node-1","containers":[%s],"volumes":[{"name":"v","emptyDir":{}}]},
		"status":{"phase":"Running","podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"%s","lastTransitionTime":"2026-01-01T00:00:00Z"},
		{"type":"ContainersReady","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}],"containerStatuses":[%s]}}`, rv, containers, ready, statuses))
}

func BenchmarkFilter(b *testing.B) {
	f, err := CompileFilter("object.metadata.labels['team'] == 'payments' && type != 'deleted'")
	if err != nil {
		b.Fatal(err)
	}
	obj := benchPod(b, 1, "True")
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match("updated", obj, obj); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkSuppressCompare is the comparison every update pays by default;
// the no-op case walks the whole object, the worst case.
func BenchmarkSuppressCompare(b *testing.B) {
	old, same, changed := benchPod(b, 1, "True"), benchPod(b, 2, "True"), benchPod(b, 2, "False")
	ignore := []Path{MustParsePath("status.conditions[*].lastTransitionTime"), MustParsePath("metadata.annotations['example.com/x']")}
	for _, bc := range []struct {
		name string
		s    *Suppressor
		new  map[string]any
	}{
		{"noop", NewSuppressor(UpdatesChanged, nil), same},
		{"noop-ignorePaths", NewSuppressor(UpdatesChanged, ignore), same},
		{"changed", NewSuppressor(UpdatesChanged, nil), changed},
		{"generationChanged", NewSuppressor(UpdatesGenerationChanged, nil), same},
		{"off", NewSuppressor(UpdatesAll, nil), same},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.s.Suppress(old, bc.new)
			}
		})
	}
}

// BenchmarkRedactSecret is the transform of a Secret with ten keys, each
// iteration on fresh values.
func BenchmarkRedactSecret(b *testing.B) {
	rules := SecretRules()
	vals := map[string]any{}
	for i := range 10 {
		vals[fmt.Sprintf("key-%d", i)] = "c2VjcmV0LXZhbHVlLXRoYXQtaXMtYS1iaXQtbG9uZ2Vy"
	}
	obj := map[string]any{"metadata": map[string]any{"name": "s", "annotations": map[string]any{}}}
	b.ReportAllocs()
	for b.Loop() {
		data := make(map[string]any, len(vals))
		for k, v := range vals {
			data[k] = v
		}
		obj["data"] = data
		Redact(obj, rules)
	}
}

func BenchmarkDiff(b *testing.B) {
	old, cur := benchPod(b, 1, "True"), benchPod(b, 2, "False")
	b.Run("update", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Diff(old, cur); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The full payload, for comparison: what diff mode adds is the rest.
	b.Run("full-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(cur); err != nil {
				b.Fatal(err)
			}
		}
	})
}
