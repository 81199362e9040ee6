package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
)

const multusManifest = `
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: br1-net
  annotations: {k8s.v1.cni.cncf.io/resourceName: bridge.network.kubevirt.io/br1}
spec:
  config: '{"cniVersion":"1.0.0","name":"br1-net","plugins":[{"type":"bridge","bridge":"br1","ipam":{"type":"static"},"capabilities":{"ips":true}},{"type":"tuning","capabilities":{"mac":true}}]}'
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: missing-net
  annotations: {k8s.v1.cni.cncf.io/resourceName: bridge.network.kubevirt.io/br-missing}
spec:
  config: '{"cniVersion":"1.0.0","name":"missing-net","type":"bridge","bridge":"br-missing"}'
---
apiVersion: v1
kind: Pod
metadata:
  name: on-br1
  annotations:
    k8s.v1.cni.cncf.io/networks: '[{"name":"br1-net","mac":"02:12:00:00:00:01","ips":["192.0.2.10/24"]}]'
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/kubevmm/pause:devel
    imagePullPolicy: Never
    # What the NetworkAttachmentDefinition's resourceName asks of its pods.
    resources: {limits: {bridge.network.kubevirt.io/br1: "1"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: on-br-missing
  annotations: {k8s.v1.cni.cncf.io/networks: missing-net}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/kubevmm/pause:devel
    imagePullPolicy: Never
    resources: {limits: {bridge.network.kubevirt.io/br-missing: "1"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: no-nad
  annotations: {k8s.v1.cni.cncf.io/networks: nope}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/kubevmm/pause:devel
    imagePullPolicy: Never
`

// TestMultus: secondary networks through kubevmm-multus and a linux
// bridge. A bridge br1 made on the node becomes the node resource
// bridge.network.kubevirt.io/br1 (bridge-marker); a pod asking for a
// NetworkAttachmentDefinition of type bridge on br1 gets net1 there with
// the MAC and address it asked for, and its network-status says so; a
// pod needing bridge br-missing, which no node has, stays Pending with
// the scheduler's reason; a pod naming a NetworkAttachmentDefinition that
// does not exist stays ContainerCreating, its event naming it. Deleting
// the pod takes its port off the bridge; removing the bridge removes the
// resource.
func TestMultus(t *testing.T) {
	freshNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", "cluster-network-addons", "logs", "ds/kubevmm-multus", "--tail=40")
			t.Logf("kubevmm-multus:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cluster-network-addons", "logs", "ds/bridge-marker", "--tail=40")
			t.Logf("bridge-marker:\n%s", out)
		}
	})
	node := kubectl(t, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
	const res = `{.status.allocatable.bridge\.network\.kubevirt\.io/br1}`

	if l, err := netlink.LinkByName("br1"); err == nil {
		require.NoError(t, netlink.LinkDel(l), "a br1 left behind")
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br1"}}
	require.NoError(t, netlink.LinkAdd(br))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName("br1"); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	require.NoError(t, netlink.LinkSetUp(br))
	kubectl(t, "wait", "node/"+node, "--for=jsonpath="+res+"=1k", "--timeout=120s")
	assert.Equal(t, "1k", kubectl(t, "get", "node", node, "-o", `jsonpath={.status.capacity.bridge\.network\.kubevirt\.io/br1}`))

	f := filepath.Join(t.TempDir(), "multus.yaml")
	require.NoError(t, os.WriteFile(f, []byte(multusManifest), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)

	t.Run("pod on br1 gets net1", func(t *testing.T) {
		wait(t, "pod/on-br1", "condition=Ready", 3*time.Minute)
		var status []nadv1.NetworkStatus
		require.NoError(t, json.Unmarshal([]byte(jsonpath(t, "pod/on-br1", `{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`)), &status))
		require.Len(t, status, 2, "%+v", status)
		assert.True(t, status[0].Default)
		assert.Equal(t, "eth0", status[0].Interface)
		assert.Equal(t, []string{jsonpath(t, "pod/on-br1", "{.status.podIP}")}, status[0].IPs)
		assert.Equal(t, nadv1.NetworkStatus{Name: ns + "/br1-net", Interface: "net1", IPs: []string{"192.0.2.10"}, Mac: "02:12:00:00:00:01"}, status[1])

		pids := podProcesses(jsonpath(t, "pod/on-br1", "{.metadata.uid}"), "pause")
		require.NotEmpty(t, pids, "the pod's processes")
		h := netlinkIn(t, pids[0])
		net1, err := h.LinkByName("net1")
		require.NoError(t, err)
		assert.Equal(t, "02:12:00:00:00:01", net1.Attrs().HardwareAddr.String())
		as, err := h.AddrList(net1, netlink.FAMILY_V4)
		require.NoError(t, err)
		require.Len(t, as, 1)
		assert.Equal(t, "192.0.2.10/24", as[0].IPNet.String())
		assert.Len(t, bridgePorts(t, "br1"), 1, "the pod's veth is on br1")
	})

	t.Run("pod needing a bridge no node has stays Pending", func(t *testing.T) {
		wait(t, "pod/on-br-missing", `jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}=Unschedulable`, 2*time.Minute)
		msg := jsonpath(t, "pod/on-br-missing", `{.status.conditions[?(@.type=="PodScheduled")].message}`)
		assert.Contains(t, msg, "Insufficient bridge.network.kubevirt.io/br-missing")
		assert.Equal(t, "Pending", jsonpath(t, "pod/on-br-missing", "{.status.phase}"))
	})

	t.Run("a missing NetworkAttachmentDefinition is named in the pod's events", func(t *testing.T) {
		want := "NetworkAttachmentDefinition " + ns + "/nope not found"
		var events string
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end) && !strings.Contains(events, want); time.Sleep(time.Second) {
			events = kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=no-nad,reason=FailedCreatePodSandBox", "-o", "jsonpath={.items[*].message}")
		}
		assert.Contains(t, events, want)
		assert.Equal(t, "Pending", jsonpath(t, "pod/no-nad", "{.status.phase}"))
	})

	t.Run("deleting the pod detaches it; removing the bridge unpublishes it", func(t *testing.T) {
		kubectl(t, "-n", ns, "delete", "pod", "on-br1", "--wait=true", "--timeout=120s")
		assert.Empty(t, bridgePorts(t, "br1"), "the pod's veth left br1")
		l, err := netlink.LinkByName("br1")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkDel(l))
		var left string
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			if left = kubectl(t, "get", "node", node, "-o", "jsonpath="+res); left == "" {
				break
			}
		}
		assert.Empty(t, left, "bridge.network.kubevirt.io/br1 is gone from the node")
	})
}

// netlinkIn is a netlink handle in process pid's network namespace.
func netlinkIn(t *testing.T, pid int) *netlink.Handle {
	t.Helper()
	n, err := netns.GetFromPid(pid)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	h, err := netlink.NewHandleAt(n)
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// bridgePorts are the host links whose master is bridge br.
func bridgePorts(t *testing.T, br string) []string {
	t.Helper()
	b, err := netlink.LinkByName(br)
	require.NoError(t, err)
	ls, err := netlink.LinkList()
	require.NoError(t, err)
	var out []string
	for _, l := range ls {
		if l.Attrs().MasterIndex == b.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}
