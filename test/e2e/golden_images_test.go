package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/storage/cdi/registry"
)

// goldenNS is the HCO's default commonBootImageNamespace.
const goldenNS = "kubevirt-os-images"

// goldenCloneDV clones the golden image's DataSource.
const goldenCloneDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: golden-clone
spec:
  sourceRef:
    kind: DataSource
    name: golden
  storage: {}
`

// TestGoldenImages: a containerDisk pushed to the dev registry as :v1 and
// named by a dataImportCronTemplate of the HyperConverged CR becomes a
// DataImportCron in kubevirt-os-images (HCO -> SSP -> CDI); its import
// Succeeds and the DataSource points at that PVC, which holds v1's bytes.
// :v2 pushed under the same tag is imported at the next tick and the
// DataSource follows, is Ready, and a DataVolume with a sourceRef to it
// clones v2; dropping the template removes the cron and, with
// retentionPolicy None, its DataSource and imports.
func TestGoldenImages(t *testing.T) {
	requireE2E(t)
	gk := func(args ...string) string {
		t.Helper()
		return kubectl(t, append([]string{"-n", goldenNS}, args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", goldenNS, "get", "dataimportcron,datasource,dv,pvc,pods", "-o", "yaml")
			t.Logf("golden images at failure:\n%s", out)
		}
		_, _ = run(t, "kubectl.sh", "-n", goldenNS, "delete", "dv/golden-clone", "--ignore-not-found")
		hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"workloadSources":{"dataImportCronTemplates":null}}}`)
		_, _ = run(t, "kubectl.sh", "-n", goldenNS, "delete", "configmap", "registry-ca", "--ignore-not-found")
	})
	cache := os.Getenv("KUBEVMM_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		cache = filepath.Join(home, ".cache", "kubevmm")
	}
	caPath := filepath.Join(cache, "k8s", "cluster", "pki", "ca.crt")
	ca, err := os.ReadFile(caPath)
	require.NoError(t, err)
	c, err := registry.New(registry.Options{CAs: [][]byte{ca}})
	require.NoError(t, err)
	image := devRegistry + "/kubevmm/golden:v1"
	ref, err := registry.ParseImage(image)
	require.NoError(t, err)
	// push writes 1 MiB of fresh bytes as the containerDisk :v1.
	push := func() (string, []byte) {
		t.Helper()
		b := make([]byte, 1<<20)
		_, _ = rand.Read(b)
		p := filepath.Join(t.TempDir(), "disk.img")
		require.NoError(t, os.WriteFile(p, b, 0o600))
		f, err := os.Open(p)
		require.NoError(t, err)
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d, err := c.PushContainerDisk(ctx, ref, "disk.img", f)
		require.NoError(t, err)
		return d, b
	}
	d1, v1 := push()

	// The namespace and the registry's CA first, so the first poll reads
	// the digest (the HCO applies the namespace as it finds it).
	if _, err := run(t, "kubectl.sh", "create", "namespace", goldenNS); err != nil {
		t.Logf("namespace %s: %v", goldenNS, err)
	}
	gk("create", "configmap", "registry-ca", "--from-file=ca.crt="+caPath)
	hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"workloadSources":{"dataImportCronTemplates":[{"metadata":{"name":"golden-cron"},`+
		`"spec":{"schedule":"* * * * *","managedDataSource":"golden","retentionPolicy":"None","template":{"spec":{"source":{"registry":`+
		`{"url":"docker://`+image+`","pullMethod":"pod","certConfigMap":"registry-ca"}},"storage":{"resources":{"requests":{"storage":"64Mi"}}}}}}}]}}}`)

	// imported waits for the DataSource on digest's import and checks the
	// bytes in its PVC.
	imported := func(digest string, want []byte) {
		t.Helper()
		pvc := "golden-" + strings.TrimPrefix(digest, "sha256:")[:12]
		var last string
		for deadline := time.Now().Add(6 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			last, _ = run(t, "kubectl.sh", "-n", goldenNS, "get", "datasource/golden", "-o", "jsonpath={.spec.source.pvc.name}")
			if last == pvc {
				break
			}
		}
		require.Equal(t, pvc, last, "the DataSource's PVC; cron: %s", gk("get", "dataimportcron/golden-cron", "-o", "jsonpath={.status}"))
		assert.Equal(t, "Succeeded", gk("get", "dv/"+pvc, "-o", "jsonpath={.status.phase}"))
		assert.Equal(t, "docker://"+devRegistry+"/kubevmm/golden@"+digest, gk("get", "dv/"+pvc, "-o", "jsonpath={.spec.source.registry.url}"), "pinned")
		assert.Equal(t, "True", gk("get", "dataimportcron/golden-cron", "-o", `jsonpath={.status.conditions[?(@.type=="UpToDate")].status}`))
		pv := gk("get", "pvc/"+pvc, "-o", "jsonpath={.spec.volumeName}")
		got, err := os.ReadFile(filepath.Join(hostpathPool(t), "csi", pv, "disk.img"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(got), len(want))
		assert.True(t, bytes.Equal(want, got[:len(want)]), "the PVC holds the pushed image's bytes")
	}
	imported(d1, v1)
	assert.Equal(t, "golden-cron", hcoKubectl(t, "get", hcoName, "-o", "jsonpath={.status.dataImportCronTemplates[0].metadata.name}"))

	d2, v2 := push()
	require.NotEqual(t, d1, d2)
	imported(d2, v2)

	// The golden image serves VMs' disks: the DataSource is Ready and a
	// DataVolume with a sourceRef to it (beside it: a clone from another
	// namespace needs the datavolumes/source check) clones v2.
	gk("wait", "datasource/golden", "--for=condition=Ready", "--timeout=2m")
	f := filepath.Join(t.TempDir(), "clone.yaml")
	require.NoError(t, os.WriteFile(f, []byte(goldenCloneDV), 0o600))
	gk("apply", "-f", f)
	gk("wait", "dv/golden-clone", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=5m")
	pv := gk("get", "pvc/golden-clone", "-o", "jsonpath={.spec.volumeName}")
	got, err := os.ReadFile(filepath.Join(hostpathPool(t), "csi", pv, "disk.img"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(got), len(v2))
	assert.True(t, bytes.Equal(v2, got[:len(v2)]), "the clone holds v2's bytes")
	gk("delete", "dv/golden-clone", "--wait=true", "--timeout=2m")

	hcoKubectl(t, "patch", hcoName, "--type=merge", "-p", `{"spec":{"workloadSources":{"dataImportCronTemplates":null}}}`)
	var left string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		left, _ = run(t, "kubectl.sh", "-n", goldenNS, "get", "dataimportcron,datasource,dv", "-o", "name")
		if !strings.Contains(left, "/") {
			break
		}
	}
	assert.NotContains(t, left, "/", "the cron, its DataSource and imports removed with the template")
	t.Logf("golden images: v1 %s, v2 %s", d1, d2)
}
