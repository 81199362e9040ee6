package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// nacJSONPatch is the HCO's annotation that patches the
// NetworkAddonsConfig it makes.
const nacJSONPatch = "networkaddonsconfigs.kubevirt.io/jsonpatch"

// TestNetworkAddons: the NetworkAddonsConfig the HCO made (multus,
// linuxBridge, kubeMacPool) is Available and its components run; a bridge
// made on the node becomes its resource bridge.network.kubevirt.io/<name>
// (bridge-marker); taking kubeMacPool out (through the HCO's jsonpatch
// annotation: the HCO owns the CR's spec) removes kubemacpool and putting
// it back restores it. The HCO's annotation is removed at the end.
func TestNetworkAddons(t *testing.T) {
	requireE2E(t)
	const nac = "networkaddonsconfig/cluster"
	addons := func(args ...string) string {
		return kubectl(t, append([]string{"-n", "cluster-network-addons"}, args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "get", nac, "-o", "yaml")
			t.Logf("NetworkAddonsConfig:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cluster-network-addons", "logs", "deploy/cluster-network-addons-operator", "--tail=40")
			t.Logf("operator:\n%s", out)
		}
	})
	kubectl(t, "wait", nac, "--for=condition=Available", "--timeout=180s")
	assert.Equal(t, "False", kubectl(t, "get", nac, "-o", `jsonpath={.status.conditions[?(@.type=="Degraded")].status}`))
	assert.NotEmpty(t, kubectl(t, "get", nac, "-o", "jsonpath={.status.observedVersion}"))
	assert.Equal(t, "DaemonSet/kubevmm-multus DaemonSet/bridge-marker Deployment/kubemacpool-mac-controller-manager",
		strings.TrimSpace(kubectl(t, "get", nac, "-o", `jsonpath={range .status.containers[*]}{.parentKind}/{.parentName} {end}`)))
	for _, w := range []string{"daemonset/kubevmm-multus", "daemonset/bridge-marker", "deployment/kubemacpool-mac-controller-manager"} {
		addons("rollout", "status", w, "--timeout=120s")
		assert.Equal(t, "NetworkAddonsConfig/cluster", addons("get", w, "-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"), w)
	}

	t.Run("a bridge becomes a node resource", func(t *testing.T) {
		node := kubectl(t, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
		const res = `{.status.allocatable.bridge\.network\.kubevirt\.io/brnac}`
		if l, err := netlink.LinkByName("brnac"); err == nil {
			require.NoError(t, netlink.LinkDel(l), "a brnac left behind")
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "brnac"}}
		require.NoError(t, netlink.LinkAdd(br))
		t.Cleanup(func() {
			if l, err := netlink.LinkByName("brnac"); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
		kubectl(t, "wait", "node/"+node, "--for=jsonpath="+res+"=1k", "--timeout=120s")
	})

	t.Run("kubeMacPool out and back", func(t *testing.T) {
		t.Cleanup(func() { _, _ = run(t, "kubectl.sh", "-n", hcoNS, "annotate", hcoName, nacJSONPatch+"-") })
		hcoKubectl(t, "annotate", "--overwrite", hcoName, nacJSONPatch+`=[{"op":"remove","path":"/spec/kubeMacPool"}]`)
		addons("wait", "deployment/kubemacpool-mac-controller-manager", "--for=delete", "--timeout=120s")
		assert.Empty(t, kubectl(t, "get", nac, "-o", "jsonpath={.spec.kubeMacPool}"))
		_, err := run(t, "kubectl.sh", "get", "mutatingwebhookconfiguration", "kubemacpool-mutator")
		assert.Error(t, err, "kubemacpool's webhook is gone")
		kubectl(t, "wait", nac, "--for=condition=Available", "--timeout=120s")

		hcoKubectl(t, "annotate", hcoName, nacJSONPatch+"-")
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
			if out, err := run(t, "kubectl.sh", "-n", "cluster-network-addons", "get", "deployment/kubemacpool-mac-controller-manager"); err == nil || !strings.Contains(out, "NotFound") {
				break
			}
		}
		addons("rollout", "status", "deployment/kubemacpool-mac-controller-manager", "--timeout=180s")
		kubectl(t, "wait", nac, "--for=condition=Available", "--timeout=120s")
		hcoWait(t, hcoName, "condition=Available", 3*time.Minute)
	})
}
