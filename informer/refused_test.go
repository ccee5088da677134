package informer

import (
	"context"
	"log/slog"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// listsAt records the options of every LIST but the one-object reads of
// the cluster's current version, and answers at version now.
type listsAt struct {
	now    string
	asked  []metav1.ListOptions
	probes int
}

func (l *listsAt) lw() *cache.ListWatch {
	return &cache.ListWatch{ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		if o.Limit == 1 && o.ResourceVersion == "" {
			l.probes++
		} else {
			l.asked = append(l.asked, o)
		}
		rv := o.ResourceVersion
		if rv == "" {
			rv = l.now
		}
		u := &unstructured.UnstructuredList{}
		u.SetResourceVersion(rv)
		return u, nil
	}}
}

// The relist that follows a refused watch must not LIST at the refused
// version again: that LIST succeeds from etcd and the watch from it is
// refused again, forever. A watch that merely broke keeps its exact relist.
func TestTheRelistAfterARefusedWatchReadsWhatIsThereNowAndDeclaresAGap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantRV  string
		wantGap *Gap
	}{
		{"refused: 410 Expired", apierrors.NewResourceExpired("too old resource version: 10 (20)"), "", &Gap{From: "10", To: "25", Reason: GapExpired}},
		{"refused: 410 Gone", apierrors.NewGone("gone"), "", &Gap{From: "10", To: "25", Reason: GapExpired}},
		{"broken: 500", apierrors.NewInternalError(context.DeadlineExceeded), "10", nil},
		{"no error", nil, "10", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &listsAt{now: "25"}
			r := &resumer{resource: "configmaps", log: slog.New(slog.DiscardHandler), lastSync: func() string { return "10" }, listed: true}
			if tc.err != nil {
				r.watchRefused(tc.err)
			}
			if _, err := r.list(context.Background(), l.lw(), metav1.ListOptions{ResourceVersion: "10"}); err != nil {
				t.Fatal(err)
			}
			got := l.asked[0]
			if got.ResourceVersion != tc.wantRV {
				t.Fatalf("listed at %q (match %q), want %q", got.ResourceVersion, got.ResourceVersionMatch, tc.wantRV)
			}
			if tc.wantRV != "" && got.ResourceVersionMatch != metav1.ResourceVersionMatchExact {
				t.Fatalf("listed with match %q, want Exact", got.ResourceVersionMatch)
			}
			gaps := r.takeGaps()
			switch {
			case tc.wantGap == nil && len(gaps) > 0:
				t.Fatalf("gaps %+v, want none", gaps)
			case tc.wantGap != nil && (len(gaps) != 1 || gaps[0] != *tc.wantGap):
				t.Fatalf("gaps %+v, want %+v", gaps, *tc.wantGap)
			}
			// The refusal is spent by the relist it caused.
			l.asked = nil
			if _, err := r.list(context.Background(), l.lw(), metav1.ListOptions{ResourceVersion: "25"}); err != nil {
				t.Fatal(err)
			}
			if l.asked[0].ResourceVersion != "25" {
				t.Fatalf("the next relist listed at %q, want exactly 25", l.asked[0].ResourceVersion)
			}
		})
	}
}

// A relist at a version the cluster has not reached (etcd restored from a
// backup) declares at once that versions went backwards: no LIST at that
// version, which would wait for it and be retried for 40 s.
func TestARelistAheadOfTheClusterDeclaresAGapThatWentBackwards(t *testing.T) {
	l := &listsAt{now: "860"}
	r := &resumer{resource: "configmaps", log: slog.New(slog.DiscardHandler), lastSync: func() string { return "1000" }, listed: true}
	if _, err := r.list(context.Background(), l.lw(), metav1.ListOptions{ResourceVersion: "1000"}); err != nil {
		t.Fatal(err)
	}
	if len(l.asked) != 1 || l.asked[0].ResourceVersion != "" {
		t.Fatalf("lists %+v, want one of what is there now", l.asked)
	}
	want := Gap{From: "1000", To: "860", Reason: GapTooLarge, Backwards: true}
	if gaps := r.takeGaps(); len(gaps) != 1 || gaps[0] != want {
		t.Fatalf("gaps %+v, want %+v", gaps, want)
	}
}
