package app

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestOnlyResourcesWithListAndWatchAreStreamableAndTheRestIsSkippedWithADebugLine(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Verbs: []string{"get", "list", "watch"}},
			{Name: "pods/log", Verbs: []string{"get"}},
			{Name: "bindings", Verbs: []string{"create"}},
			{Name: "componentstatuses", Verbs: []string{"get", "list"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Verbs: []string{"list", "watch", "create"}},
			{Name: "deployments/scale", Verbs: []string{"get", "list", "watch"}},
		}},
	}
	got := streamable(lists, log)
	want := []schema.GroupVersionResource{{Version: "v1", Resource: "pods"}, {Group: "apps", Version: "v1", Resource: "deployments"}}
	if !slices.Equal(got, want) {
		t.Errorf("streamable: %v, want %v", got, want)
	}
	for _, skipped := range []string{"pods/log", "bindings", "componentstatuses", "deployments/scale"} {
		if !strings.Contains(logs.String(), "level=DEBUG msg=\"discovery: skipping") || !strings.Contains(logs.String(), "resource="+skipped) {
			t.Errorf("no debug line for %s:\n%s", skipped, logs.String())
		}
	}
}

func TestKubewiresOwnLeasesAreLeftOutByNameWhateverTheSelector(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "metadata.name!=kubewire,metadata.name!=kubewire-checkpoint"},
		{"metadata.namespace=x", "metadata.namespace=x,metadata.name!=kubewire,metadata.name!=kubewire-checkpoint"},
	} {
		if got := withoutNames(tc.in, []string{"kubewire", "kubewire-checkpoint"}); got != tc.want {
			t.Errorf("withoutNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
