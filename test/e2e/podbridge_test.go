package e2e

import (
	"encoding/json"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// TestPodBridgeBinding: a VMI whose only NIC is bridge-bound on the pod
// network (one guest boot). Its guest takes the pod's IP by DHCP from
// its launcher (the guest's `ip addr` shows the IP kubectl reports for
// the pod), and its echo server answers on the pod IP from another pod
// (virt-api's), from the node, and through `virtctl port-forward`
// (virt-handler dials the guest from the pod, now that the pod has no IP
// of its own). The guest has the MAC the pod network's CNI gave the pod's
// eth0 (its network-status), as KubeVirt's guest does, and eth0 another;
// status.interfaces reports the pod IP and that MAC; LiveMigratable is
// False naming the interface, and a migration fails at once.
func TestPodBridgeBinding(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-podbridge")
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-podbridge.yaml"))
	kubectl(t, "-n", ns, "wait", "vmi/podbr", "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	pod := kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=podbr", "-o", "jsonpath={.items[0].metadata.name}")
	podIP := jsonpathIn(t, ns, "pod/"+pod, "{.status.podIP}")
	require.NotEmpty(t, podIP)
	t.Logf("kubectl get pod -o wide:\n%s", kubectl(t, "-n", ns, "get", "pod", pod, "-o", "wide"))

	t0 := time.Now()
	out := consoleUntil(t, ns, "podbr", "PODBR-42", 15*time.Minute)
	t.Logf("MEASURED guest up with its lease after %v", time.Since(t0).Round(time.Second))
	lease := regexp.MustCompile(`kubevmm-guest: dhcp lease .*`).FindString(out)
	t.Logf("%s", lease)
	at := strings.Index(out, "runcmd ip -4 addr")
	require.GreaterOrEqual(t, at, 0, "the guest ran ip addr:\n%s", out)
	m := regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/(\d+)`).FindStringSubmatch(out[at:])
	require.NotNil(t, m, "the guest's ip addr shows an address:\n%s", out)
	assert.Equal(t, podIP, m[1], "the guest has the pod's IP")
	assert.Contains(t, lease, "routes=", "the lease has classless routes")
	assert.Contains(t, lease, vmispec.PodBridgeFakeIP+"/32 0.0.0.0", "and the bridge's address on link")

	var netStatus []nadv1.NetworkStatus
	require.NoError(t, json.Unmarshal([]byte(jsonpathIn(t, ns, "pod/"+pod, `{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`)), &netStatus))
	require.NotEmpty(t, netStatus)
	require.True(t, netStatus[0].Default, "%+v", netStatus)
	cniMAC := netStatus[0].Mac
	require.NotEmpty(t, cniMAC, "the CNI reported eth0's MAC: %+v", netStatus)
	gm := regexp.MustCompile(`GUEST-MAC=([0-9a-f:]{17})`).FindStringSubmatch(out)
	require.NotNil(t, gm, "the guest printed its MAC:\n%s", out)
	assert.Equal(t, cniMAC, gm[1], "the guest has eth0's original MAC")
	pids := podProcesses(jsonpathIn(t, ns, "pod/"+pod, "{.metadata.uid}"), "virt-launcher")
	require.NotEmpty(t, pids, "the launcher's processes")
	eth0, err := netlinkIn(t, pids[0]).LinkByName("eth0")
	require.NoError(t, err)
	assert.NotEqual(t, cniMAC, eth0.Attrs().HardwareAddr.String(), "the pod's eth0 has another MAC now")

	var st v1.VirtualMachineInstanceStatus
	require.NoError(t, json.Unmarshal([]byte(jsonpathIn(t, ns, "vmi/podbr", "{.status}")), &st))
	require.Len(t, st.Interfaces, 1, "%+v", st.Interfaces)
	assert.Equal(t, podIP, st.Interfaces[0].IP)
	assert.Equal(t, "eth0", st.Interfaces[0].PodInterfaceName)
	assert.Equal(t, cniMAC, st.Interfaces[0].MAC)
	var migratable *v1.VirtualMachineInstanceCondition
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.VirtualMachineInstanceIsMigratable {
			migratable = &st.Conditions[i]
		}
	}
	require.NotNil(t, migratable, "a LiveMigratable condition: %+v", st.Conditions)
	assert.Equal(t, "False", string(migratable.Status))
	assert.Equal(t, vmispec.ReasonInterfaceNotLiveMigratable, migratable.Reason)
	assert.Contains(t, migratable.Message, "interface default")

	// Another pod reaches the guest at the pod IP.
	probe := netprobePod(t, ns, "probe", func(m string) { applyYAMLIn(t, ns, "probe", m) })
	c, err := dialFromNetns(probe, net.JoinHostPort(podIP, "1234"))
	require.NoError(t, err, "another pod reaches the guest's echo server at the pod IP")
	_, err = c.Write([]byte("from another pod\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	got := make([]byte, len("from another pod\n"))
	_, err = c.Read(got)
	c.Close()
	require.NoError(t, err)
	assert.Equal(t, "from another pod\n", string(got))
	// The node, and virtctl port-forward (status.interfaces[0] is the pod IP).
	portForwardEcho(t, ns, "podbr")

	virtctlIn(t, ns, "migrate", "podbr")
	mig := strings.TrimSpace(jsonpathIn(t, ns, "vmim", "{.items[*].metadata.name}"))
	require.NotEmpty(t, mig)
	waitIn(t, ns, "vmim/"+mig, "jsonpath={.status.phase}=Failed", 2*time.Minute)
	assert.Equal(t, pod, kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=podbr", "-o", "jsonpath={.items[*].metadata.name}"), "no target pod")
}
