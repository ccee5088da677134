package nodecluster

import (
	"fmt"
	"strconv"
	"strings"
)

// This file is the one place that says how the node is configured:
// containerd, the CNI network, the kubelet and kube-proxy. Settings that are
// not Kubernetes' or containerd's defaults carry a comment saying why; the
// ones marked "this VM" are what our CI machines (Firecracker VMs with cgroup
// v1 and without CAP_SYS_RESOURCE) need, found by a probe (issue 32).

const (
	// NodeName is the name the kubelet registers the node under.
	NodeName = "kubewire-node"
	// Bridge is the CNI bridge the pods are attached to. The cluster creates
	// it, with GatewayIP, before anything starts: the apiserver and the
	// brokers on the host bind to GatewayIP, which every pod reaches through
	// its default route, so nothing listens on the host's other interfaces.
	Bridge = "kubewire0"
	// PodSubnet is the pods' addresses, handed out by host-local.
	PodSubnet = "10.244.0.0/24"
	// GatewayIP is the host's address on Bridge: the node's InternalIP, the
	// apiserver's, the cluster DNS stand-in's and the host brokers'.
	GatewayIP = "10.244.0.1"
	// gatewayCIDR is GatewayIP with PodSubnet's prefix length.
	gatewayCIDR = GatewayIP + "/24"
	// ClusterDomain is the DNS suffix of Services.
	ClusterDomain = "cluster.local"
	// cniDir is where Debian's containernetworking-plugins installs the
	// plugins.
	cniDir = "/usr/lib/cni"
	// PauseImage is the pod sandbox image (cmd/pause), imported like the
	// others in images.go; it exists nowhere else, so pods that use it say
	// imagePullPolicy Never.
	PauseImage = "kubewire.test/pause:e2e"
)

// hostSysctls are the kernel settings the node's components change, saved
// before the cluster starts and written back after it stops:
//   - ip_forward: the CNI bridge plugin turns it on (isGateway);
//   - bridge-nf-call-iptables: set to 1 at start (hostSettings), so that
//     a pod's reply to another pod that reached it through a ClusterIP
//     passes kube-proxy's NAT on the bridge and gets the ClusterIP back as
//     its source; without it `helm test` (a pod asking the metrics Service)
//     cannot connect;
//   - route_localnet: kube-proxy's localhost NodePorts would turn it on
//     (they are off below, so this is a safety net);
//   - the vm and kernel settings: the kubelet's setupKernelTunables sets
//     them at start unless protectKernelDefaults is on, which would instead
//     refuse to start on a host whose values differ.
var hostSysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/ipv4/conf/all/route_localnet",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hostSettings are the kernel settings written at start, each one of
// hostSysctls.
var hostSettings = map[string]string{"net/bridge/bridge-nf-call-iptables": "1"}

// containerdConfig is containerd's config.toml. Every path containerd
// writes (its root, state, sockets, plugins' data and the pods' network
// namespaces) is under dir, so a stop removes it with the directory; only
// the shims' sockets go to /run/containerd/s (hostDirs).
func containerdConfig(dir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  # The pause image is imported from a tarball; nothing is pulled.
  sandbox_image = %[6]q
  # The exec/attach streaming server: loopback and an ephemeral port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This VM: it drops CAP_SYS_RESOURCE, so runc cannot give a container the
  # negative OOM score the kubelet asks for ("nsexec: failed to update
  # /proc/self/oom_score_adj: Permission denied", surfacing as "can't get
  # final child's PID from pipe: EOF"). This caps the score at containerd's
  # own instead.
  restrict_oom_score_adj = true
  # The pods' network namespaces, by default in /run/netns.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # Matches the kubelet's cgroupDriver: no systemd runs here.
        SystemdCgroup = false
        # runc's state, by default in /run/containerd/runc.
        Root = %[9]q

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, dir+"/root", dir+"/state", dir+"/containerd.sock", dir+"/containerd.sock.ttrpc",
		dir+"/opt", PauseImage, cniDir, dir+"/net.d", dir+"/runc")
}

// cniConfig is the pods' network: one bridge with host-local addresses and
// no masquerading (pods only talk to the host and to each other).
func cniConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kubewire",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, Bridge, ipamDir, PodSubnet, GatewayIP)
}

// kubeletConfig is the KubeletConfiguration. logDir holds the pods' logs
// (the default is /var/log/pods).
func kubeletConfig(endpoint, logDir, pluginDir string, port int) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM mounts cgroup v1, which the kubelet refuses from 1.35 on unless
# told otherwise.
failCgroupV1: false
# No systemd runs here, so cgroups are managed directly (containerd's
# SystemdCgroup = false matches).
cgroupDriver: cgroupfs
containerRuntimeEndpoint: ` + endpoint + `
address: ` + GatewayIP + `
port: ` + strconv.Itoa(port) + `
# No unauthenticated read-only port, no healthz port: fixed ports would
# collide with anything else on the host.
readOnlyPort: 0
healthzPort: 0
# The apiserver reaches the kubelet (exec, logs) without a client
# certificate; this throwaway node lets it.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
# A DNS stand-in in the test process answers for Services (no CoreDNS).
clusterDNS: [` + GatewayIP + `]
clusterDomain: ` + ClusterDomain + `
podLogsDir: ` + logDir + `
# FlexVolume drivers, by default under /usr/libexec/kubernetes.
volumePluginDir: ` + pluginDir + `
failSwapOn: false
# CI disks are shared and may be fuller than the eviction defaults allow;
# evicting the test's pods would only make it flaky.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
# The imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`
}

// kubeProxyConfig is the KubeProxyConfiguration: iptables mode, leaving the
// host's conntrack settings and route_localnet alone.
func kubeProxyConfig(kubeconfig string, healthzPort, metricsPort int) string {
	return strings.Join([]string{
		"apiVersion: kubeproxy.config.k8s.io/v1alpha1",
		"kind: KubeProxyConfiguration",
		"mode: iptables",
		"clientConnection:",
		"  kubeconfig: " + kubeconfig,
		"hostnameOverride: " + NodeName,
		"clusterCIDR: " + PodSubnet,
		"healthzBindAddress: 127.0.0.1:" + strconv.Itoa(healthzPort),
		"metricsBindAddress: 127.0.0.1:" + strconv.Itoa(metricsPort),
		// Zero leaves the host's conntrack table size and timeouts as they are.
		"conntrack:",
		"  maxPerCore: 0",
		"  min: 0",
		"  tcpEstablishedTimeout: 0s",
		"  tcpCloseWaitTimeout: 0s",
		// NodePorts on 127.0.0.1 would need route_localnet=1 on the host.
		"iptables:",
		"  localhostNodePorts: false",
		"",
	}, "\n")
}
