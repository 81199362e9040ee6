package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/net/macpool"
)

const (
	kmpNamespace  = "cluster-network-addons"
	kmpDeployment = "deployment/kubemacpool-mac-controller-manager"
)

// kmpMetrics is kubemacpool's /metrics, scraped at its pod with token (one
// allowed to GET /metrics: scraperToken).
func kmpMetrics(t *testing.T, token string) string {
	t.Helper()
	code, body := metricsGet(t, serviceEndpoint(t, kmpNamespace, "kubemacpool-service"), token)
	if code != http.StatusOK {
		t.Fatalf("kubemacpool's /metrics with the scraper's token: %d %s", code, body)
	}
	return body
}

// kmpVM writes a halted VM with a masquerade NIC on the pod network and a
// bridge NIC on NAD br1 (brMAC, if not "", asked for), in namespace.
func kmpVM(t *testing.T, namespace, name, brMAC string) string {
	t.Helper()
	mac := ""
	if brMAC != "" {
		mac = ", macAddress: " + brMAC
	}
	f := filepath.Join(t.TempDir(), name+".yaml")
	require.NoError(t, os.WriteFile(f, []byte(fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: %s, namespace: %s}
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices:
          interfaces:
          - {name: default, masquerade: {}}
          - {name: br1, bridge: {}%s}
      networks:
      - {name: default, pod: {}}
      - {name: br1, multus: {networkName: br1}}
`, name, namespace, mac)), 0o644))
	return f
}

// kmpRange is kubemacpool's MAC range, from its ConfigMap.
func kmpRange(t *testing.T) macpool.Range {
	t.Helper()
	start := kubectl(t, "-n", kmpNamespace, "get", "configmap/kubemacpool-mac-range-config", "-o", "jsonpath={.data.RANGE_START}")
	end := kubectl(t, "-n", kmpNamespace, "get", "configmap/kubemacpool-mac-range-config", "-o", "jsonpath={.data.RANGE_END}")
	r, ok, err := macpool.ParseRange(start, end)
	require.NoError(t, err)
	require.True(t, ok, "kubemacpool has a range")
	return r
}

// kmpCreate creates what file holds just after kubemacpool restarted and
// returns kubectl's output. The API server reaches the new pod once its
// endpoint propagated, a moment after the pod was seen ready: until then
// a review fails to be sent (and nothing is created).
func kmpCreate(t *testing.T, file string) string {
	t.Helper()
	var out string
	var err error
	for range 30 {
		out, err = run(t, "kubectl.sh", "create", "-f", file)
		if err == nil || !strings.Contains(out, "failed calling webhook") {
			break
		}
		time.Sleep(time.Second)
	}
	require.NoError(t, err, out)
	return out
}

// vmMACs are the VM's interfaces' MACs, in order.
func vmMACs(t *testing.T, namespace, name string) []string {
	t.Helper()
	return strings.Fields(kubectl(t, "-n", namespace, "get", "vm/"+name, "-o", "jsonpath={.spec.template.spec.domain.devices.interfaces[*].macAddress}"))
}

// TestKubeMacPool: VMs with a NIC on br1 (a NAD of type bridge) get
// distinct MACs from kubemacpool's range on every interface, keep them
// across an update that leaves one out and a `rollout restart` of
// kubemacpool (which rebuilds its pool from the VMs: a new VM gets yet
// another MAC). A VM asking for a MAC already in use is admitted with a
// warning and counted by kmp_mac_collisions (upstream's current
// behaviour) until it is deleted; an invalid MAC is refused naming the
// field; a namespace labelled mutatevirtualmachines.kubemacpool.io=ignore
// is left alone. The VMs stay halted: no guest boots.
func TestKubeMacPool(t *testing.T) {
	freshNamespace(t)
	nad := filepath.Join(t.TempDir(), "nad.yaml")
	require.NoError(t, os.WriteFile(nad, []byte(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: br1}
spec:
  config: '{"cniVersion":"1.0.0","name":"br1","plugins":[{"type":"bridge","bridge":"br1"}]}'
`), 0o644))
	kubectl(t, "-n", ns, "apply", "-f", nad)
	r := kmpRange(t)
	inRange := func(vm string, macs []string) {
		t.Helper()
		require.Len(t, macs, 2, "%s: a MAC on each interface", vm)
		for _, s := range macs {
			m, err := macpool.ParseMAC(s)
			require.NoError(t, err)
			assert.True(t, m >= r.Start && m <= r.End, "%s: %s in %s-%s", vm, s, r.Start, r.End)
		}
	}

	seen := map[string]string{}
	distinct := func(vm string, macs []string) {
		t.Helper()
		for _, m := range macs {
			assert.NotContains(t, seen, m, "%s's %s is also %s's", vm, m, seen[m])
			seen[m] = vm
		}
	}
	macs := map[string][]string{}
	for _, vm := range []string{"kmp-a", "kmp-b"} {
		kubectl(t, "create", "-f", kmpVM(t, ns, vm, ""))
		macs[vm] = vmMACs(t, ns, vm)
		inRange(vm, macs[vm])
		distinct(vm, macs[vm])
	}
	t.Logf("kmp-a %v, kmp-b %v", macs["kmp-a"], macs["kmp-b"])

	// An update that leaves the bridge NIC's MAC out keeps it.
	kubectl(t, "-n", ns, "patch", "vm/kmp-a", "--type=json", "-p", `[{"op":"remove","path":"/spec/template/spec/domain/devices/interfaces/1/macAddress"}]`)
	assert.Equal(t, macs["kmp-a"], vmMACs(t, ns, "kmp-a"))

	// A restart of kubemacpool: the VMs keep their MACs, and the new pod's
	// pool, rebuilt from them, hands out another.
	kubectl(t, "-n", kmpNamespace, "rollout", "restart", kmpDeployment)
	kubectl(t, "-n", kmpNamespace, "rollout", "status", kmpDeployment, "--timeout=180s")
	for _, vm := range []string{"kmp-a", "kmp-b"} {
		assert.Equal(t, macs[vm], vmMACs(t, ns, vm), "%s after kubemacpool's restart", vm)
	}
	kmpCreate(t, kmpVM(t, ns, "kmp-c", ""))
	c := vmMACs(t, ns, "kmp-c")
	inRange("kmp-c", c)
	distinct("kmp-c", c)

	// A MAC already in use: admitted, with a warning naming the VM that
	// has it, and counted as a collision until one of them goes.
	taken := macs["kmp-a"][1]
	out := kubectl(t, "create", "-f", kmpVM(t, ns, "kmp-copy", taken))
	assert.Contains(t, out, "MAC "+taken+" is already in use by "+ns+"/kmp-a")
	assert.Equal(t, taken, vmMACs(t, ns, "kmp-copy")[1])
	collision := fmt.Sprintf(`kmp_mac_collisions{mac=%q} 2`, taken)
	scraper := scraperToken(t)
	assert.Contains(t, kmpMetrics(t, scraper), collision)
	kubectl(t, "-n", ns, "delete", "vm/kmp-copy", "--wait=true")
	var metrics string
	for range 60 {
		if metrics = kmpMetrics(t, scraper); !strings.Contains(metrics, collision) {
			break
		}
		time.Sleep(time.Second)
	}
	assert.NotContains(t, metrics, collision, "the deleted VM's MAC is freed")

	// An invalid MAC is refused, naming the field.
	out, err := run(t, "kubectl.sh", "create", "-f", kmpVM(t, ns, "kmp-bad", "02:00:00:00:00"))
	require.Error(t, err, out)
	assert.Contains(t, out, "spec.template.spec.domain.devices.interfaces[1].macAddress")
	assert.Contains(t, out, `"02:00:00:00:00" is not a MAC address`)

	// An opted-out namespace's VMs are left alone.
	optout := ns + "-kmp-optout"
	kubectl(t, "delete", "namespace", optout, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", optout)
	t.Cleanup(func() { kubectl(t, "delete", "namespace", optout, "--wait=false") })
	kubectl(t, "label", "namespace", optout, "mutatevirtualmachines.kubemacpool.io=ignore")
	kubectl(t, "-n", optout, "apply", "-f", nad)
	kubectl(t, "create", "-f", kmpVM(t, optout, "kmp-ignored", ""))
	var ifaces []map[string]any
	require.NoError(t, json.Unmarshal([]byte(kubectl(t, "-n", optout, "get", "vm/kmp-ignored", "-o", "jsonpath={.spec.template.spec.domain.devices.interfaces}")), &ifaces))
	for _, i := range ifaces {
		assert.NotContains(t, i, "macAddress", "%v", i)
	}
}
