package raw

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// After an etcd restore the API server answers a LIST or WATCH at a
// version it does not have yet with 504 and a Status whose cause says
// "resource version too large"; an expired one with 410. Both must reach
// the caller as the API server's Status, causes and all.
func TestListAndWatchErrorsCarryTheAPIServersStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		body   string
		reason metav1.StatusReason
		cause  metav1.CauseType
	}{
		{"too large", http.StatusGatewayTimeout,
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too large resource version: 1000, current: 860","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}`,
			metav1.StatusReasonTimeout, metav1.CauseTypeResourceVersionTooLarge},
		{"expired", http.StatusGone,
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (10)","reason":"Expired","code":410}`,
			metav1.StatusReasonExpired, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c, err := NewRESTClient(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			lw := NewListWatch(ListWatchOptions{Client: c, GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}})
			_, listErr := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "1000", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			_, watchErr := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "1000"})
			for what, err := range map[string]error{"list": listErr, "watch": watchErr} {
				if apierrors.ReasonForError(err) != tc.reason {
					t.Errorf("%s: reason %q, want %q (%v)", what, apierrors.ReasonForError(err), tc.reason, err)
				}
				if tc.cause != "" && !apierrors.HasStatusCause(err, tc.cause) {
					t.Errorf("%s: %v has no cause %s", what, err, tc.cause)
				}
			}
		})
	}
}
