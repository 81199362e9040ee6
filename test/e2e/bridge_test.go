package e2e

import (
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// TestBridgeNetworks: two VMIs with a NIC on a NAD of type bridge on the
// node's br1 (bridge binding on a multus network) reach each other over
// it: brb's pings to bra are answered. bra's first NIC is masquerade with
// ports [80]: its echo server on 80 answers through the pod IP, while 22,
// where it listens too, is the pod's own (refused). The launcher pod asks
// Multus for br1 and for bridge-marker's resource, and status.interfaces
// reports both of bra's NICs. Then bra migrates: its MAC stays, and brb's
// pings over br1 reach it in its new pod.
func TestBridgeNetworks(t *testing.T) {
	freshNamespace(t)
	nodeBridge(t, "br1")

	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-bridge.yaml"))
	for _, vmi := range []string{"bra", "brb"} {
		kubectl(t, "-n", ns, "wait", "vmi/"+vmi, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	}

	pod := kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=bra", "-o", "jsonpath={.items[0].metadata.name}")
	var nets []map[string]string
	require.NoError(t, json.Unmarshal([]byte(jsonpath(t, "pod/"+pod, `{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/networks}`)), &nets))
	assert.Equal(t, []map[string]string{{"name": "br1", "namespace": ns, "interface": vmispec.MultusInterfaceName("br1"), "mac": "02:00:00:00:b1:0a"}}, nets)
	assert.Equal(t, "1", jsonpath(t, "pod/"+pod, `{.spec.containers[0].resources.limits.bridge\.network\.kubevirt\.io/br1}`))

	t0 := time.Now()
	out := consoleUntil(t, ns, "brb", "BR1-PING-42", 15*time.Minute)
	summary := pingSummary(out[strings.LastIndex(out, "kubevmm-guest: runcmd until ping"):])
	t.Logf("MEASURED both guests up and brb -> bra over br1 after %v: %s", time.Since(t0).Round(time.Second), summary)
	assert.Contains(t, summary, "3 packets transmitted, 3 packets received")

	// bra is up (it answered); its echo servers listen (its runcmd saw
	// them in /proc/net/tcp).
	consoleUntil(t, ns, "bra", "LISTENING-42", 5*time.Minute)
	var st v1.VirtualMachineInstanceStatus
	require.NoError(t, json.Unmarshal([]byte(jsonpath(t, "vmi/bra", "{.status}")), &st))
	require.Len(t, st.Interfaces, 2, "%+v", st.Interfaces)
	podIP := st.Interfaces[0].IP
	assert.Equal(t, "default", st.Interfaces[0].Name)
	assert.Equal(t, "br1", st.Interfaces[1].Name)
	assert.Equal(t, "02:00:00:00:b1:0a", st.Interfaces[1].MAC)
	assert.Equal(t, vmispec.MultusInterfaceName("br1"), st.Interfaces[1].PodInterfaceName)
	assert.Contains(t, st.Interfaces[1].InfoSource, "multus-status")

	require.NoError(t, echo(net.JoinHostPort(podIP, "80")), "port 80 reaches the guest through the pod IP")
	c, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, "22"), time.Minute)
	if err == nil {
		c.Close()
	}
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "port 22 is not forwarded (the pod refuses it): %v", err)

	source := pod
	virtctl(t, "migrate", "bra")
	mig := strings.TrimSpace(jsonpath(t, "vmim", "{.items[*].metadata.name}"))
	require.NotEmpty(t, mig)
	require.NotContains(t, mig, " ", "one migration")
	t0 = time.Now()
	wait(t, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	t.Logf("MEASURED migration of bra: %v", time.Since(t0).Round(time.Millisecond))
	// Until the source pod goes, the node's bridge still sends bra's
	// frames to the source's port (its forwarding entry); its removal
	// flushes the entry.
	wait(t, "pod/"+source, "delete", 3*time.Minute)
	target := kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=bra", "-o", "jsonpath={.items[0].metadata.name}")
	require.NotEqual(t, source, target)
	assert.Equal(t, "02:00:00:00:b1:0a", jsonpath(t, "vmi/bra", "{.status.interfaces[1].mac}"), "the MAC is kept")
	out = consoleRunThenIn(t, ns, "brb", "ping -c 3 192.168.51.10; echo AFTER-MIG-$((40+2))", "AFTER-MIG-42", nil, "", 3*time.Minute)
	// The console replays its history (the first pings) first.
	summary = pingSummary(out[strings.LastIndex(out, "echo AFTER-MIG-$((40+2))"):])
	t.Logf("brb -> migrated bra over br1: %s", summary)
	assert.Contains(t, summary, "3 packets transmitted, 3 packets received")
}

// nodeBridge makes the Linux bridge name on the node (this host), gone
// after the test, and waits for bridge-marker to publish it.
func nodeBridge(t *testing.T, name string) {
	t.Helper()
	node := kubectl(t, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
	if l, err := netlink.LinkByName(name); err == nil {
		require.NoError(t, netlink.LinkDel(l), "a %s left behind", name)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	require.NoError(t, netlink.LinkAdd(br))
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	require.NoError(t, netlink.LinkSetUp(br))
	kubectl(t, "wait", "node/"+node, `--for=jsonpath={.status.allocatable.bridge\.network\.kubevirt\.io/`+name+`}=1k`, "--timeout=120s")
}
