package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
	cdiinstall "github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/operator/hco"
	hcoinstall "github.com/kubevmm/kubevmm/operator/hco/install"
	"github.com/kubevmm/kubevmm/operator/ssp"
	cdiapiserver "github.com/kubevmm/kubevmm/storage/cdi/apiserver"
	tvwebhook "github.com/kubevmm/kubevmm/templatevalidator/webhook"
	"github.com/kubevmm/kubevmm/virtapi"
)

// tenantBlankDV is a small blank disk, the victim's.
const tenantBlankDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: %s
spec:
  source:
    blank: {}
  storage:
    resources:
      requests:
        storage: 64Mi
`

// tenantAnnotatedClaim is a claim its user annotates as a clone target of
// %[2]s (CDI's annotations, as the DataVolume controller writes them on a
// clone's target) and an upload target, so that an upload server runs for
// it: what the clone controller once took for a clone to run.
const tenantAnnotatedClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %[1]s
  annotations:
    k8s.io/CloneRequest: %[2]s
    cdi.kubevirt.io/storage.upload.target: ""
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 64Mi
`

// tenantDataSource is a DataSource of the attacker's own namespace naming
// the victim's claim; tenantSourceRefDV a DataVolume of it.
const (
	tenantDataSource = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataSource
metadata:
  name: mine
spec:
  source:
    pvc:
      namespace: %s
      name: disk
`
	tenantSourceRefDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: %s
spec:
  sourceRef:
    kind: DataSource
    name: mine
  storage: {}
`
)

// tenantVMI is a small VMI of the attacker's own, on the pod network.
const tenantVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: own
spec:
  domain:
    memory:
      guest: 64Mi
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 reboot=k panic=-1 quiet kubevmm.mode=shell"
        container:
          image: localhost/kubevmm/test-guest:devel
          imagePullPolicy: IfNotPresent
          kernelPath: /boot/vmlinux
          initrdPath: /boot/initramfs.cpio
    devices: {}
`

// tenantVMWithNIC is a stopped VM of the attacker's with one interface
// left for kubemacpool to give a MAC.
const tenantVMWithNIC = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: nics
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        memory:
          guest: 64Mi
        devices:
          interfaces:
          - name: default
            masquerade: {}
      networks:
      - name: default
        pod: {}
`

// webhookPost posts an AdmissionReview to a webhook's pod at addr
// (ip:port), as anything on the pod network could, without a client
// certificate: the status code and the body.
func webhookPost(t *testing.T, addr, path string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	// Who serves is not what this checks: who may call.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // see above
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err, "POST %s to %s", path, addr)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTenantIsolation: two ordinary users, each with edit in their own
// namespace only (impersonated: mallory in the attacker's namespace; the
// victim's namespace is the test's). Every way to have CDI copy the
// victim's disk into the attacker's namespace is tried and refused: a
// clone DataVolume (refused at admission, naming spec.source.pvc), a claim
// annotated as a clone target by its user (the clone controller refuses it
// with event CloneValidationFailed and makes no clone source pod, even
// once its upload server is ready), a DataSource of the attacker's own
// namespace naming the victim's claim (a DataVolume of it is refused at
// admission naming spec.sourceRef; one admitted before the DataSource
// existed, its token naming the DataSource, fails CloneValidationFailed
// and gets no claim), and a DataVolume whose source is changed after it
// was admitted (refused naming spec.source). virt-handler's and
// virt-controller's metrics, which name every tenant's VMs, answer no
// token with 401 and her ServiceAccount's token with 403. Admission
// reviews sent straight to the webhook pods of kubemacpool, virt-api,
// cdi-apiserver, the template validator and the HCO (64 to kubemacpool,
// four MACs asked for in each) are 401:
// they answer only the API server's client certificate, and her VM made
// through the API server still gets its MAC. Her pod reaches the
// components' ports that serve anyone (those webhooks, the aggregated
// APIs, /metrics, the upload proxy, the CLI downloads) and none of the
// others, which their NetworkPolicies close; of the components only
// cdi-deployment (registries anywhere) reaches her pod. A copy of her
// VMI's launcher pod labelled as a migration target gets nothing from
// virt-handler (no tap: its launcher waits). The
// victim's marker never appears in the attacker's namespace, and no clone
// source pod ever runs in the victim's.
func TestTenantIsolation(t *testing.T) {
	freshNamespace(t)
	victim, attacker := ns, ns+"-attacker"
	kubectl(t, "delete", "namespace", attacker, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", attacker)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", attacker, "get", "dv,pvc,pods,datasources,events", "-o", "wide")
			t.Logf("the attacker's namespace at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cdi", "logs", "deploy/cdi-deployment", "--tail=60")
			t.Logf("cdi-controller:\n%s", out)
			return
		}
		_, _ = run(t, "kubectl.sh", "delete", "namespace", attacker, "--wait=false")
	})
	kubectl(t, "-n", attacker, "create", "rolebinding", "mallory-edit", "--clusterrole=edit", "--user=mallory")
	mallory := func(args ...string) (string, error) {
		return run(t, "kubectl.sh", append([]string{"--as=mallory", "-n", attacker}, args...)...)
	}
	malloryApply := func(name, body string) (string, error) {
		f := filepath.Join(t.TempDir(), name+".yaml")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		return mallory("create", "-f", f)
	}
	// RBAC hears of the binding a moment after it is made.
	var can string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && can != "yes"; time.Sleep(time.Second) {
		can, _ = run(t, "kubectl.sh", "auth", "can-i", "--as=mallory", "-n", attacker, "create", "persistentvolumeclaims")
		can = strings.TrimSpace(can)
	}
	require.Equal(t, "yes", can, "mallory may create claims in her namespace")
	for _, what := range []string{"persistentvolumeclaims", "datavolumes.cdi.kubevirt.io/source"} {
		verb := "get"
		if strings.HasSuffix(what, "/source") {
			verb = "create"
		}
		out, _ := run(t, "kubectl.sh", "auth", "can-i", "--as=mallory", "-n", victim, verb, what)
		require.Equal(t, "no", strings.TrimSpace(out), "mallory may not %s %s in the victim's namespace", verb, what)
	}

	// The victim's disk, a marker written into it.
	applyYAML(t, "disk", fmt.Sprintf(tenantBlankDV, "disk"))
	wait(t, "dv/disk", "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
	marker := []byte(fmt.Sprintf("kubevmm tenant isolation: the victim's secret %d", time.Now().UnixNano()))
	f, err := os.OpenFile(diskImage(t, "disk"), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(marker, 1<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	source := victim + "/disk"

	t.Run("clone DataVolume refused at admission", func(t *testing.T) {
		out, err := malloryApply("direct", fmt.Sprintf(strings.Replace(cdiCloneExample, "cloned-datavolume", "direct", 1), victim))
		require.Error(t, err, out)
		assert.Contains(t, out, "spec.source.pvc: Forbidden")
		assert.Contains(t, out, fmt.Sprintf(`user "mallory" may not clone PVC %s/golden`, victim))
	})

	t.Run("claim annotated as a clone target", func(t *testing.T) {
		out, err := malloryApply("stolen", fmt.Sprintf(tenantAnnotatedClaim, "stolen", source))
		require.NoError(t, err, out)
		// Its upload server runs (its first consumer binds it) and is
		// ready: the point where the clone source pod used to start. The
		// upload controller makes the pod a moment after the claim: wait
		// on a pod not made yet fails at once (NotFound).
		kubectl(t, "-n", attacker, "wait", "pod/cdi-upload-stolen", "--for=create", "--timeout=120s")
		kubectl(t, "-n", attacker, "wait", "pod/cdi-upload-stolen", "--for=condition=Ready", "--timeout=300s")
		var events string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && !strings.Contains(events, "CloneValidationFailed"); time.Sleep(time.Second) {
			events = kubectl(t, "-n", attacker, "get", "events", "--field-selector", "involvedObject.name=stolen,reason=CloneValidationFailed", "-o", "jsonpath={.items[*].reason} {.items[*].message}")
		}
		require.Contains(t, events, "CloneValidationFailed", "the refusal's event on the claim")
		assert.Contains(t, events, "no clone token")
		t.Logf("the refusal: %s", events)
		assert.Equal(t, "CloneValidationFailed", kubectl(t, "-n", attacker, "get", "pvc/stolen", "-o", `jsonpath={.metadata.annotations.cdi\.kubevirt\.io/storage\.condition\.running\.reason}`))
	})

	t.Run("DataSource of her own naming the victim's claim", func(t *testing.T) {
		// Made before the DataSource: admitted, its token naming the
		// DataSource (a golden image not imported yet looks the same).
		out, err := malloryApply("early", fmt.Sprintf(tenantSourceRefDV, "early"))
		require.NoError(t, err, out)
		out, err = malloryApply("mine", fmt.Sprintf(tenantDataSource, victim))
		require.NoError(t, err, "her own DataSource is hers to write: %s", out)
		kubectl(t, "-n", attacker, "wait", "dv/early", "--for=jsonpath={.status.phase}=Failed", "--timeout=120s")
		reason := kubectl(t, "-n", attacker, "get", "dv/early", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}`)
		assert.Contains(t, reason, "CloneValidationFailed")
		assert.Contains(t, reason, "not of PVC "+source)
		out, _ = mallory("get", "pvc/early", "-o", "name")
		assert.Contains(t, out, "NotFound", "no claim for a clone not authorized")
		// Made after it: refused at admission.
		out, err = malloryApply("late", fmt.Sprintf(tenantSourceRefDV, "late"))
		require.Error(t, err, out)
		assert.Contains(t, out, fmt.Sprintf(`spec.sourceRef: Forbidden: user "mallory" may not clone PVC %s`, source))
	})

	t.Run("source changed after admission", func(t *testing.T) {
		out, err := malloryApply("own", fmt.Sprintf(tenantBlankDV, "own"))
		require.NoError(t, err, out)
		out, err = mallory("patch", "dv/own", "--type=json", "-p",
			fmt.Sprintf(`[{"op":"remove","path":"/spec/source/blank"},{"op":"add","path":"/spec/source/pvc","value":{"namespace":%q,"name":"disk"}}]`, victim))
		require.Error(t, err, out)
		assert.Contains(t, out, "spec.source: Forbidden: cannot be changed once the DataVolume is created")
	})

	t.Run("metrics refused without a token or with a tenant's", func(t *testing.T) {
		out, err := mallory("create", "serviceaccount", "snoop")
		require.NoError(t, err, out)
		// The token her pods get for it.
		tenantToken := strings.TrimSpace(kubectl(t, "-n", attacker, "create", "token", "snoop"))
		scraper := scraperToken(t)
		targets := map[string][]string{
			// The webhook servers' /metrics, on their HTTPS ports.
			"kubemacpool":             {serviceEndpoint(t, kmpNamespace, "kubemacpool-service")},
			"virt-api":                {serviceEndpoint(t, hcoNS, "virt-api")},
			"virt-template-validator": {serviceEndpoint(t, hcoNS, ssp.ValidatorName)},
		}
		for _, app := range []string{"virt-handler", "virt-controller"} {
			for _, ip := range componentIPs(t, app) {
				targets[app] = append(targets[app], net.JoinHostPort(ip, "8443"))
			}
		}
		for app, addrs := range targets {
			for _, addr := range addrs {
				code, body := metricsGet(t, addr, "")
				assert.Equal(t, http.StatusUnauthorized, code, "%s at %s without a token: %s", app, addr, body)
				assert.NotContains(t, body, "go_goroutines")
				code, body = metricsGet(t, addr, tenantToken)
				assert.Equal(t, http.StatusForbidden, code, "%s at %s with a tenant's token: %s", app, addr, body)
				assert.NotContains(t, body, "go_goroutines")
				// The refusals come from a working server: the scraper's
				// token gets the metrics.
				code, body = metricsGet(t, addr, scraper)
				assert.Equal(t, http.StatusOK, code, "%s at %s with the scraper's token", app, addr)
				assert.Contains(t, body, "go_goroutines")
			}
		}
	})

	t.Run("webhooks answer only the API server", func(t *testing.T) {
		// Anything on the pod network reaches a webhook's pod; before the
		// webhooks checked for the API server's certificate, each of
		// these reviews got an answer, and each kubemacpool one held
		// four MACs of the pool.
		review := func(uid string) []byte {
			vm := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": map[string]any{"name": uid, "namespace": attacker},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{
					"interfaces": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c"}, map[string]any{"name": "d"}}}}}}}}
			b, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
				"request": map[string]any{"uid": uid, "operation": "CREATE", "namespace": attacker, "name": uid, "object": vm,
					"userInfo": map[string]any{"username": "mallory"}}})
			require.NoError(t, err)
			return b
		}
		for _, hook := range []struct{ namespace, service, path string }{
			{"cluster-network-addons", "kubemacpool-service", kubemacpool.PathMutateVM},
			{hcoNS, "virt-api", virtapi.PathMutateVM},
			{hcoNS, "virt-api", virtapi.PathValidateVM},
			{"cdi", cdiinstall.APIServerService, cdiapiserver.MutateDataVolumePath},
			{hcoNS, ssp.ValidatorName, tvwebhook.PathVirtualMachine},
			{hcoNS, hcoinstall.WebhookService, hco.ValidatePath},
		} {
			ep := serviceEndpoint(t, hook.namespace, hook.service)
			n := 1
			if hook.service == "kubemacpool-service" {
				n = 64 // a flood: 256 MACs asked for
			}
			for i := range n {
				code, body := webhookPost(t, ep, hook.path, review(fmt.Sprintf("flood-%d", i)))
				require.Equal(t, http.StatusUnauthorized, code, "%s%s from the pod network: %s", hook.service, hook.path, body)
				assert.NotContains(t, body, "patch")
			}
		}
		// The webhooks still answer the API server: her VM gets its MAC.
		out, err := malloryApply("nics", tenantVMWithNIC)
		require.NoError(t, err, out)
		mac := kubectl(t, "-n", attacker, "get", "vm/nics", "-o", "jsonpath={.spec.template.spec.domain.devices.interfaces[0].macAddress}")
		_, err = macpool.ParseMAC(mac)
		assert.NoError(t, err, "kubemacpool gave her VM a MAC through the API server: %q", mac)
	})

	t.Run("her pods and the components reach each other only where a job needs it", func(t *testing.T) {
		// Before the components' NetworkPolicies (and an enforcer on the
		// node), every port below was open to her pod: virt-handler's
		// API and migration ports (mutual TLS their only guard) and every
		// component's health port; and every component reached her pod.
		probe := netprobePod(t, attacker, "probe", func(m string) {
			out, err := malloryApply("probe", m)
			require.NoError(t, err, out)
		})
		pods := componentPods(t)
		var closed, open int
		for _, cp := range componentPorts(t, pods, probe) {
			anyone, known := openToAnyone[cp.workload]
			require.True(t, known, "%s (workload %s): the test does not know what it serves", cp.pod, cp.workload)
			if slices.Contains(anyone, cp.port) {
				assert.True(t, cp.reached, "%s at %s serves anyone, yet her pod did not reach it", cp.pod, cp.addr)
				open++
			} else {
				assert.False(t, cp.reached, "her pod reached %s at %s, which its NetworkPolicy closes to her", cp.pod, cp.addr)
				closed++
			}
		}
		t.Logf("her pod reached the %d ports that serve anyone and none of the other %d", open, closed)
		assert.Positive(t, closed, "ports closed to her were tried")

		// Her pod listens, and the node reaches it; of the components
		// only cdi-deployment does, whose registries may be anywhere.
		addr := net.JoinHostPort(kubectl(t, "-n", attacker, "get", "pod", "probe", "-o", "jsonpath={.status.podIP}"), strconv.Itoa(netprobePort))
		c, err := dialFromNetns(os.Getpid(), addr)
		require.NoError(t, err, "the node reaches her pod at %s", addr)
		c.Close()
		reached := componentsReaching(t, pods, addr)
		for w, ok := range reached {
			assert.Equal(t, w == "cdi-deployment", ok, "%s reaching her pod at %s", w, addr)
		}
		t.Logf("the components that reached her pod, of %d: %v", len(reached), reached)

		// A policy deleted is drift: its operator puts it back.
		kubectl(t, "-n", hcoNS, "delete", "networkpolicy", "virt-handler", "--wait=true")
		kubectl(t, "-n", hcoNS, "wait", "networkpolicy/virt-handler", "--for=create", "--timeout=120s")
	})

	t.Run("a fake migration-target pod", func(t *testing.T) {
		// Her own VMI; then a copy of its launcher pod (she may read it),
		// labelled as the target of a migration nobody asked for. Before
		// virt-handler checked that virt-controller handed the pod a
		// migration, it set up the pod's network from the node (tap,
		// NAT) for whatever process served the pod's control socket.
		out, err := malloryApply("own", tenantVMI)
		require.NoError(t, err, out)
		kubectl(t, "-n", attacker, "wait", "vmi/own", "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
		uid := kubectl(t, "-n", attacker, "get", "vmi/own", "-o", "jsonpath={.metadata.uid}")
		var pods struct {
			Items []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal([]byte(kubectl(t, "-n", attacker, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "json")), &pods))
		require.Len(t, pods.Items, 1, "the VMI's launcher pod")
		pod := pods.Items[0]
		meta := pod["metadata"].(map[string]any)
		labels := meta["labels"].(map[string]any)
		labels["kubevirt.io/migrationJobUID"] = "forged"
		pod["metadata"] = map[string]any{"name": "fake-target", "labels": labels, "annotations": meta["annotations"], "ownerReferences": meta["ownerReferences"]}
		delete(pod, "status")
		b, err := json.Marshal(pod)
		require.NoError(t, err)
		out, err = malloryApply("fake-target", string(b))
		require.NoError(t, err, out)
		// Its launcher is up and waits for its tap: what virt-handler
		// used to make it.
		const waiting = "waiting for virt-handler to create tap0"
		var logs string
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline) && !strings.Contains(logs, waiting); time.Sleep(time.Second) {
			logs, _ = mallory("logs", "fake-target", "-c", "compute")
		}
		require.Contains(t, logs, waiting, "the fake target's launcher serves its control socket")
		time.Sleep(30 * time.Second) // the handler answered a launcher in Starting within seconds
		logs, err = mallory("logs", "fake-target", "-c", "compute")
		require.NoError(t, err, logs)
		assert.NotContains(t, logs, `"state":"Running"`, "the fake target's VMM never ran: no tap was made for it")
		assert.Empty(t, kubectl(t, "-n", attacker, "get", "vmi/own", "-o", "jsonpath={.status.migrationState}"), "no migration state")
		// The VMI's real launcher was not disturbed.
		assert.Equal(t, "Running", kubectl(t, "-n", attacker, "get", "vmi/own", "-o", "jsonpath={.status.phase}"))
	})

	t.Run("the victim's bytes never left", func(t *testing.T) {
		out := kubectl(t, "-n", victim, "get", "pods", "-l", "cdi.kubevirt.io/cloneTarget", "-o", "name")
		assert.Empty(t, strings.TrimSpace(out), "a clone source pod in the victim's namespace")
		pool := filepath.Join(hostpathPool(t), "csi")
		for _, claim := range strings.Fields(kubectl(t, "-n", attacker, "get", "pvc", "-o", "jsonpath={.items[*].spec.volumeName}")) {
			img, err := os.ReadFile(filepath.Join(pool, claim, "disk.img"))
			if os.IsNotExist(err) {
				continue
			}
			require.NoError(t, err)
			assert.False(t, bytes.Contains(img, marker), "the victim's marker in the attacker's volume %s", claim)
		}
		img, err := os.ReadFile(diskImage(t, "disk"))
		require.NoError(t, err)
		assert.True(t, bytes.Contains(img, marker), "the victim's disk still holds its marker")
	})
}
