//go:build cluster

package nodecluster_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubewire/kubewire/internal/testing/nodecluster"
	"github.com/kubewire/kubewire/internal/testing/testkit"
)

func TestClusterTheNodeRunsAPodOnTheBridgeAndItsTeardownLeavesTheHostAsItWas(t *testing.T) {
	c := nodecluster.Start(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: nodecluster.PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, subnet, _ := net.ParseCIDR(nodecluster.PodSubnet)
	var got *corev1.Pod
	testkit.Within(t, time.Minute, "the pod running with an address on the bridge", func() bool {
		var err error
		got, err = c.Client.CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning && subnet.Contains(net.ParseIP(got.Status.PodIP))
	}, func() string { return got.Status.String() })
}
