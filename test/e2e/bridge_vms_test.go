package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/net/macpool"
)

// TestBridgeVMs: issue 12's must-show on VirtualMachines. Two VMs (bva,
// bvb: runStrategy Always, no macAddress) with their NIC on br1, a NAD of
// type bridge, get distinct MACs from kubemacpool's range, their guests
// have them and bvb pings bva over br1. bvb restarted keeps its MAC (spec
// and guest) and pings again; kubemacpool restarted (its pod deleted)
// still holds both MACs: a new VM gets another, and the VMs' specs are
// unchanged. A VM asking for bva's MAC is admitted with a warning and
// counted as a collision (kubemacpool's current behaviour, see README).
// A VM whose NAD names a bridge no node has is ErrorUnschedulable, its
// launcher pod Pending and its VMI's PodScheduled naming the bridge's
// resource. bva migrates: its MAC
// stays and bvb's pings over br1 reach it in its new pod. Three guest
// boots (bva, bvb, bvb again).
func TestBridgeVMs(t *testing.T) {
	freshNamespace(t)
	nodeBridge(t, "br1")
	r := kmpRange(t)
	vms := []string{"bva", "bvb"}
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm-bridge.yaml"))
	// The MAC each VM was given at admission.
	macs := map[string]string{}

	t.Run("kubemacpool gives each VM a distinct MAC from its range", func(t *testing.T) {
		for _, vm := range vms {
			got := vmMACs(t, ns, vm)
			require.Len(t, got, 1, "%s: a MAC on its NIC", vm)
			m, err := macpool.ParseMAC(got[0])
			require.NoError(t, err)
			assert.True(t, m >= r.Start && m <= r.End, "%s: %s in %s-%s", vm, got[0], r.Start, r.End)
			macs[vm] = got[0]
		}
		t.Logf("bva %s, bvb %s", macs["bva"], macs["bvb"])
		assert.NotEqual(t, macs["bva"], macs["bvb"])
	})
	require.Len(t, macs, 2)

	// While the guests boot.
	t.Run("a NAD naming a bridge no node has: ErrorUnschedulable", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "nobridge.yaml")
		require.NoError(t, os.WriteFile(f, []byte(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: nobridge
  annotations:
    k8s.v1.cni.cncf.io/resourceName: bridge.network.kubevirt.io/br-nowhere
spec:
  config: '{"cniVersion":"1.0.0","name":"nobridge","plugins":[{"type":"bridge","bridge":"br-nowhere"}]}'
---
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: bvnone}
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices:
          interfaces:
          - {name: nb, bridge: {}}
      networks:
      - {name: nb, multus: {networkName: nobridge}}
`), 0o644))
		kubectl(t, "-n", ns, "apply", "-f", f)
		wait(t, "vm/bvnone", "jsonpath={.status.printableStatus}=ErrorUnschedulable", 3*time.Minute)
		var st v1.VirtualMachineInstanceStatus
		require.NoError(t, json.Unmarshal([]byte(jsonpath(t, "vmi/bvnone", "{.status}")), &st))
		assert.Equal(t, v1.Scheduling, st.Phase, "its pod waits for a node")
		pod := kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=bvnone", "-o", "jsonpath={.items[*].status.phase}")
		assert.Equal(t, "Pending", pod)
		var c *v1.VirtualMachineInstanceCondition
		for i := range st.Conditions {
			if st.Conditions[i].Type == v1.VirtualMachineInstancePodScheduled {
				c = &st.Conditions[i]
			}
		}
		require.NotNil(t, c, "a PodScheduled condition: %+v", st.Conditions)
		t.Logf("PodScheduled: %s %s: %s", c.Status, c.Reason, c.Message)
		assert.Equal(t, "False", string(c.Status))
		assert.Equal(t, "Unschedulable", c.Reason)
		assert.Contains(t, c.Message, "bridge.network.kubevirt.io/br-nowhere")
		kubectl(t, "-n", ns, "delete", "vm/bvnone", "--wait=true", "--timeout=120s")
	})

	// guestMAC is the MAC the guest's runcmd printed on its console.
	guestMAC := func(t *testing.T, out string) string {
		t.Helper()
		m := regexp.MustCompile(`GUEST-MAC=([0-9a-f:]{17})`).FindStringSubmatch(out)
		require.NotNil(t, m, "the guest printed its MAC:\n%s", out)
		return m[1]
	}
	t.Run("the guests have their MACs and ping each other over br1", func(t *testing.T) {
		for _, vm := range vms {
			wait(t, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
		}
		t0 := time.Now()
		out := consoleUntil(t, ns, "bvb", "BR1-PING-42", 15*time.Minute)
		summary := pingSummary(out)
		t.Logf("MEASURED both guests up and bvb -> bva over br1 after %v: %s", time.Since(t0).Round(time.Second), summary)
		assert.Contains(t, summary, "3 packets transmitted, 3 packets received")
		assert.Equal(t, macs["bvb"], guestMAC(t, out), "bvb's guest")
		assert.Equal(t, macs["bva"], guestMAC(t, consoleUntil(t, ns, "bva", "UP-42", 5*time.Minute)), "bva's guest")
		for _, vm := range vms {
			assert.Equal(t, macs[vm], jsonpath(t, "vmi/"+vm, "{.status.interfaces[0].mac}"), "%s's status", vm)
		}
	})

	t.Run("virtctl restart keeps the MAC", func(t *testing.T) {
		uid := jsonpath(t, "vmi/bvb", "{.metadata.uid}")
		virtctl(t, "restart", "bvb")
		// The old VMI goes first, so `kubectl wait` (which fails on a
		// missing object) cannot watch for the new one.
		until(t, 3*time.Minute, "a new VMI bvb", func() bool {
			out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi/bvb", "-o", "jsonpath={.metadata.uid}")
			return err == nil && out != "" && out != uid
		})
		wait(t, "vmi/bvb", "jsonpath={.status.phase}=Running", 5*time.Minute)
		assert.Equal(t, []string{macs["bvb"]}, vmMACs(t, ns, "bvb"), "the VM's spec")
		t0 := time.Now()
		out := consoleUntil(t, ns, "bvb", "BR1-PING-42", 15*time.Minute)
		summary := pingSummary(out)
		t.Logf("MEASURED restarted bvb up and pinging bva after %v: %s", time.Since(t0).Round(time.Second), summary)
		assert.Equal(t, macs["bvb"], guestMAC(t, out), "the restarted guest")
		assert.Contains(t, summary, "3 packets transmitted, 3 packets received")
	})

	t.Run("kubemacpool restarted still holds the VMs' MACs", func(t *testing.T) {
		sel := "control-plane=mac-controller-manager"
		old := kubectl(t, "-n", kmpNamespace, "get", "pods", "-l", sel, "-o", "jsonpath={.items[*].metadata.name}")
		require.NotEmpty(t, old)
		kubectl(t, "-n", kmpNamespace, "delete", "pods", "-l", sel, "--wait=true", "--timeout=120s")
		var pod string
		until(t, 2*time.Minute, "a new kubemacpool pod", func() bool {
			pod = kubectl(t, "-n", kmpNamespace, "get", "pods", "-l", sel, "-o", "jsonpath={.items[*].metadata.name}")
			return pod != "" && pod != old && !strings.Contains(pod, " ")
		})
		kubectl(t, "-n", kmpNamespace, "wait", "pod/"+pod, "--for=condition=Ready", "--timeout=180s")
		kmpCreate(t, kmpVM(t, ns, "bvc", ""))
		c := vmMACs(t, ns, "bvc")
		require.Len(t, c, 2)
		t.Logf("bvc after kubemacpool's restart: %v", c)
		for _, m := range c {
			assert.NotContains(t, []string{macs["bva"], macs["bvb"]}, m, "bvc gets a MAC neither VM has")
		}
		for _, vm := range vms {
			assert.Equal(t, []string{macs[vm]}, vmMACs(t, ns, vm), "%s's spec after kubemacpool's restart", vm)
		}
	})

	t.Run("a VM asking for a MAC in use is admitted with a warning", func(t *testing.T) {
		taken := macs["bva"]
		out := kubectl(t, "create", "-f", kmpVM(t, ns, "bvcopy", taken))
		assert.Contains(t, out, "Warning: spec.template.spec.domain.devices.interfaces[1].macAddress (interface br1): MAC "+taken+" is already in use by "+ns+"/bva")
		assert.Equal(t, taken, vmMACs(t, ns, "bvcopy")[1])
		assert.Contains(t, kmpMetrics(t, scraperToken(t)), fmt.Sprintf(`kmp_mac_collisions{mac=%q} 2`, taken))
		kubectl(t, "-n", ns, "delete", "vm/bvcopy", "--wait=true")
	})

	t.Run("live migration keeps the MAC and br1", func(t *testing.T) {
		source := kubectl(t, "-n", ns, "get", "pods", "-l", v1.VirtualMachineNameLabel+"=bva", "-o", "jsonpath={.items[0].metadata.name}")
		virtctl(t, "migrate", "bva")
		mig := strings.TrimSpace(jsonpath(t, "vmim", "{.items[*].metadata.name}"))
		require.NotEmpty(t, mig)
		require.NotContains(t, mig, " ", "one migration")
		t0 := time.Now()
		wait(t, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
		t.Logf("MEASURED migration of bva: %v", time.Since(t0).Round(time.Millisecond))
		// Until the source pod goes, the node's bridge still sends bva's
		// frames to the source's port (see TestBridgeNetworks).
		wait(t, "pod/"+source, "delete", 3*time.Minute)
		assert.Equal(t, macs["bva"], jsonpath(t, "vmi/bva", "{.status.interfaces[0].mac}"), "the VMI's MAC")
		assert.Equal(t, []string{macs["bva"]}, vmMACs(t, ns, "bva"), "the VM's spec")
		out := consoleRunThenIn(t, ns, "bvb", "ping -c 3 192.168.52.10; echo AFTER-MIG-$((40+2))", "AFTER-MIG-42", nil, "", 3*time.Minute)
		// The console replays its history (the first pings) first.
		summary := pingSummary(out[strings.LastIndex(out, "echo AFTER-MIG-$((40+2))"):])
		t.Logf("bvb -> migrated bva over br1: %s", summary)
		assert.Contains(t, summary, "3 packets transmitted, 3 packets received")
		out = consoleRunThenIn(t, ns, "bva", "echo MIGRATED-MAC=$(cat /sys/class/net/eth0/address) MIG-$((40+2))", "MIG-42", nil, "", 3*time.Minute)
		assert.Contains(t, out, "MIGRATED-MAC="+macs["bva"]+" MIG-42", "the migrated guest's NIC")
	})
}

// until polls cond every second until it holds, failing the test after
// bound: for what `kubectl wait` cannot watch (an object not there yet).
func until(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, bound)
		}
	}
}
