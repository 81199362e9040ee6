package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// netprobeManifest is a pod of hack/image/netprobe, which accepts
// connections on netprobePort: the tests dial from its network namespace
// (dialFromNetns), as any pod there would, and to it.
const netprobeManifest = `apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: netprobe
    image: localhost/kubevmm/netprobe:devel
    imagePullPolicy: Never
    readinessProbe:
      tcpSocket:
        port: 8080
      periodSeconds: 1
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: [ALL]
`

// netprobeImage is the image's build and import, once: tests that run in
// parallel would otherwise write the same image file at once.
var netprobeImage struct {
	once sync.Once
	out  string
	err  error
}

// netprobePort is where a netprobe pod accepts connections.
const netprobePort = 8080

// netprobePod makes pod name in namespace with create (which applies a
// manifest as whoever the test means) and returns its netprobe process.
func netprobePod(t *testing.T, namespace, name string, create func(manifest string)) int {
	t.Helper()
	netprobeImage.once.Do(func() { netprobeImage.out, netprobeImage.err = run(t, "cluster/images.sh", "netprobe") })
	require.NoError(t, netprobeImage.err, netprobeImage.out)
	create(strings.Replace(netprobeManifest, "%s", name, 1))
	kubectl(t, "-n", namespace, "wait", "pod/"+name, "--for=condition=Ready", "--timeout=120s")
	pids := podProcesses(kubectl(t, "-n", namespace, "get", "pod", name, "-o", "jsonpath={.metadata.uid}"), "netprobe")
	require.NotEmpty(t, pids, "the netprobe process of pod %s/%s", namespace, name)
	return pids[0]
}

// workloadOf is the name of the Deployment or DaemonSet that made pod:
// its generateName without the ReplicaSet's template hash.
func workloadOf(pod corev1.Pod) string {
	w := strings.TrimSuffix(pod.GenerateName, "-")
	if h := pod.Labels["pod-template-hash"]; h != "" {
		w = strings.TrimSuffix(w, "-"+h)
	}
	return w
}

// listeningPorts are the TCP ports pod declares or is probed on.
func listeningPorts(pod corev1.Pod) []int {
	var out []int
	add := func(p int) {
		if p > 0 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			add(int(p.ContainerPort))
		}
		for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if pr != nil && pr.HTTPGet != nil {
				add(pr.HTTPGet.Port.IntValue())
			}
		}
	}
	return out
}

// openToAnyone are the components' ports any pod may reach, by workload:
// servers that authenticate every caller themselves (webhooks and
// aggregated APIs take only the API server's client certificate, /metrics
// a token allowed to read them), the upload proxy and the CLI downloads.
// Every other port of theirs is closed to pods that are not their peers.
var openToAnyone = map[string][]int{
	"virt-operator": nil, "virt-api": {8443}, "virt-controller": {8443}, "virt-handler": {8443},
	"hyperconverged-cluster-operator": {4343, 8080}, "hyperconverged-cluster-cli-download": {8080},
	"ssp-operator": nil, "virt-template-validator": {8443},
	"cdi-operator": nil, "cdi-deployment": nil, "cdi-apiserver": {8443}, "cdi-uploadproxy": {8443},
	"cluster-network-addons-operator": nil, "kubemacpool-mac-controller-manager": {8443},
	"hostpath-provisioner-operator": nil, "hostpath-provisioner": nil,
}

// componentPods are the pods of the components' namespaces that
// NetworkPolicies apply to: running, not on the host's network.
func componentPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, ns := range []string{hcoNS, "cdi", kmpNamespace, "hostpath-provisioner"} {
		var pods corev1.PodList
		require.NoError(t, json.Unmarshal([]byte(kubectl(t, "-n", ns, "get", "pods", "-o", "json")), &pods))
		for _, p := range pods.Items {
			if !p.Spec.HostNetwork && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// componentPort is one port a component pod listens on, and whether a
// probe pod reached it.
type componentPort struct {
	pod      string // namespace/name
	workload string
	port     int
	addr     string
	reached  bool
}

// componentPorts dials every port each of pods listens on from the
// node, which reaches them all (policies never restrict a pod's node, so
// this shows the port listens), and then from pid's network namespace.
func componentPorts(t *testing.T, pods []corev1.Pod, pid int) []componentPort {
	t.Helper()
	var out []componentPort
	for _, p := range pods {
		for _, port := range listeningPorts(p) {
			cp := componentPort{pod: p.Namespace + "/" + p.Name, workload: workloadOf(p), port: port,
				addr: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))}
			c, err := dialFromNetns(os.Getpid(), cp.addr)
			require.NoError(t, err, "%s listens on %d: the node reaches it", cp.pod, port)
			c.Close()
			if c, err = dialFromNetns(pid, cp.addr); err == nil {
				c.Close()
			}
			cp.reached = err == nil
			out = append(out, cp)
		}
	}
	return out
}

// componentsReaching dials addr from each of pods' network namespace and
// says, by workload, which reached it.
func componentsReaching(t *testing.T, pods []corev1.Pod, addr string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, p := range pods {
		// The container's process: its image's entrypoint,
		// /usr/bin/<image name> (a command name keeps 15 bytes).
		name, _, _ := strings.Cut(filepath.Base(p.Spec.Containers[0].Image), ":")
		pids := podProcesses(string(p.UID), name[:min(len(name), 15)])
		require.NotEmpty(t, pids, "the %s process of pod %s/%s", name, p.Namespace, p.Name)
		c, err := dialFromNetns(pids[0], addr)
		if err == nil {
			c.Close()
		}
		got[workloadOf(p)] = err == nil
	}
	return got
}
