package e2e

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	hcoNS   = "kubevirt"
	hcoName = "hco/kubevirt-hyperconverged"
	hcoKV   = "kubevirt/kubevirt-kubevirt-hyperconverged"
)

// hcoKubectl is kubectl in the HCO's namespace.
func hcoKubectl(t *testing.T, args ...string) string {
	t.Helper()
	return kubectl(t, append([]string{"-n", hcoNS}, args...)...)
}

// hcoWait is `kubectl wait` on an object of the HCO's namespace.
func hcoWait(t *testing.T, what, cond string, bound time.Duration) {
	t.Helper()
	hcoKubectl(t, "wait", what, "--for="+cond, "--timeout="+strconv.Itoa(int(bound.Seconds()))+"s")
}

// podGet GETs path from port of the first pod labelled selector in the
// HCO's namespace (the host reaches pod IPs).
func podGet(t *testing.T, selector string, port int, path string) []byte {
	t.Helper()
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + net.JoinHostPort(podIPs(t, hcoNS, selector)[0], strconv.Itoa(port)) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from %s: %s, %v", path, selector, resp.Status, err)
	}
	return b
}

// TestHyperConverged: the cluster's HyperConverged CR (sync.sh made it)
// takes upstream's sample in both versions and stays Available; the
// KubeVirt CR it made is kept as it says (an edit reverted and counted,
// the jsonpatch annotation sticking and tainting); admission refuses a
// bad certConfig and an uninstall while a VM exists; cli-download serves
// virtctl. The CR's spec and annotations are put back at the end.
func TestHyperConverged(t *testing.T) {
	freshNamespace(t)
	orig := hcoKubectl(t, "get", hcoName, "-o", "json")
	var saved struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal([]byte(orig), &saved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		restore, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec", "value": saved.Spec}})
		if err != nil {
			t.Fatal(err)
		}
		hcoKubectl(t, "patch", hcoName, "--type=json", "-p", string(restore))
		hcoWait(t, hcoName, "condition=Available", 5*time.Minute)
	})

	t.Run("upstream's sample, v1 and v1beta1", func(t *testing.T) {
		for _, f := range []string{"hco.cr.yaml", "hco.cr.v1beta1.yaml"} {
			hcoKubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-sample", "-f", filepath.Join(repo, "test/e2e/testdata", f))
			hcoWait(t, hcoName, "jsonpath={.status.observedGeneration}="+hcoKubectl(t, "get", hcoName, "-o", "jsonpath={.metadata.generation}"), 2*time.Minute)
			hcoWait(t, hcoName, "condition=Available", 5*time.Minute)
			hcoWait(t, hcoKV, "jsonpath={.spec.configuration.migrations.completionTimeoutPerGiB}=20", time.Minute)
		}
		// Stored as v1, served as v1beta1 through the conversion webhook.
		got := hcoKubectl(t, "get", "hyperconvergeds.v1beta1.hco.kubevirt.io", "kubevirt-hyperconverged", "-o",
			"jsonpath={.apiVersion} {.spec.liveMigrationConfig.parallelMigrationsPerCluster} {.spec.certConfig.ca.duration} {.spec.uninstallStrategy}")
		if want := "hco.kubevirt.io/v1beta1 5 48h0m0s BlockUninstallIfWorkloadsExist"; got != want {
			t.Fatalf("read as v1beta1: %q, want %q", got, want)
		}
		st := hcoKubectl(t, "get", hcoName, "-o", `jsonpath={.status.systemHealthStatus} {.status.versions[0].name} {.status.relatedObjects[?(@.kind=="KubeVirt")].name}`)
		if !strings.HasPrefix(st, "healthy operator kubevirt-kubevirt-hyperconverged") {
			t.Fatalf("status: %q", st)
		}
	})

	t.Run("an edit of the KubeVirt CR is reverted and counted", func(t *testing.T) {
		hcoKubectl(t, "patch", hcoKV, "--type=merge", "-p", `{"spec":{"configuration":{"migrations":{"parallelMigrationsPerCluster":9}}}}`)
		hcoWait(t, hcoKV, "jsonpath={.spec.configuration.migrations.parallelMigrationsPerCluster}=5", time.Minute)
		// The counter is read from the operator's process, which counts
		// right after its reverting write: read until it shows.
		re := regexp.MustCompile(`(?m)^kubevirt_hco_out_of_band_modifications_total\{component_name="kubevirt/kubevirt-kubevirt-hyperconverged"\} (\d+)`)
		// Over HTTPS, to a token allowed to GET /metrics.
		addr := net.JoinHostPort(podIPs(t, hcoNS, "name=hyperconverged-cluster-operator")[0], "8080")
		if code, body := metricsGet(t, addr, ""); code != http.StatusUnauthorized {
			t.Errorf("the operator's /metrics without a token: %d %s", code, body)
		}
		scraper := scraperToken(t)
		var metrics string
		var m []string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			var code int
			if code, metrics = metricsGet(t, addr, scraper); code != http.StatusOK {
				t.Fatalf("the operator's /metrics with the scraper's token: %d %s", code, metrics)
			}
			if m = re.FindStringSubmatch(metrics); (m != nil && m[1] != "0") || time.Now().After(deadline) {
				break
			}
		}
		if m == nil || m[1] == "0" {
			t.Fatalf("no out-of-band modification counted:\n%s", metrics)
		}
		t.Logf("kubevirt_hco_out_of_band_modifications_total for the KubeVirt CR: %s", m[1])
	})

	t.Run("the jsonpatch annotation sticks and taints", func(t *testing.T) {
		if saved.Metadata.Annotations["kubevirt.kubevirt.io/jsonpatch"] == "" {
			t.Fatal("sync.sh's HyperConverged CR has no kubevirt.kubevirt.io/jsonpatch annotation")
		}
		hcoWait(t, hcoName, "condition=TaintedConfiguration", time.Minute)
		hcoWait(t, hcoKV, "jsonpath={.spec.configuration.developerConfiguration.featureGates[0]}=SameNodeLiveMigration", time.Minute)
		// Removed from the KubeVirt CR by hand, the patched field comes back.
		hcoKubectl(t, "patch", hcoKV, "--type=json", "-p", `[{"op":"remove","path":"/spec/configuration/developerConfiguration"}]`)
		hcoWait(t, hcoKV, "jsonpath={.spec.configuration.developerConfiguration.featureGates[0]}=SameNodeLiveMigration", time.Minute)
	})

	t.Run("a bad certConfig is refused, naming the field", func(t *testing.T) {
		out, err := run(t, "kubectl.sh", "-n", hcoNS, "patch", hcoName, "--type=merge", "-p",
			`{"spec":{"security":{"certConfig":{"ca":{"duration":"48h","renewBefore":"72h"}}}}}`)
		if err == nil || !strings.Contains(out, "spec.security.certConfig.ca.renewBefore") {
			t.Fatalf("want a refusal naming spec.security.certConfig.ca.renewBefore, got %v: %s", err, out)
		}
	})

	t.Run("deleting it is refused while a VM exists", func(t *testing.T) {
		kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/kubevirt-vm-cirros.yaml"))
		// A server-side dry run goes through admission and deletes nothing,
		// whatever the webhook says.
		out, err := run(t, "kubectl.sh", "-n", hcoNS, "delete", hcoName, "--dry-run=server")
		if err == nil || !strings.Contains(out, "BlockUninstallIfWorkloadsExist") {
			t.Fatalf("want the delete refused under BlockUninstallIfWorkloadsExist, got %v: %s", err, out)
		}
		kubectl(t, "-n", ns, "delete", "vm", "vm-cirros", "--wait=true")
	})

	t.Run("cli-download serves virtctl", func(t *testing.T) {
		b := podGet(t, "name=hyperconverged-cluster-cli-download", 8080, "/amd64/linux/virtctl.tar.gz")
		zr, err := gzip.NewReader(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		h, err := tar.NewReader(zr).Next()
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "virtctl" || h.Size < 1<<20 {
			t.Fatalf("virtctl.tar.gz holds %s (%d bytes), want virtctl", h.Name, h.Size)
		}
		t.Logf("virtctl.tar.gz: %s", fmt.Sprintf("%d bytes, virtctl %d bytes", len(b), h.Size))
	})
}
