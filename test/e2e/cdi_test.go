package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// The images server: hack/image/cdi-e2e-http serving the test's directory
// on the node (root: the directory is the test's, mode 0700).
const cdiServer = `apiVersion: v1
kind: Pod
metadata:
  name: images
spec:
  securityContext:
    runAsUser: 0
  containers:
  - name: server
    image: localhost/kubevmm/cdi-e2e-http:devel
    imagePullPolicy: Never
    args: ["-dir=/srv", "-addr=:8080"]
    volumeMounts:
    - {name: images, mountPath: /srv, readOnly: true}
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
  volumes:
  - name: images
    hostPath: {path: %q, type: Directory}
`

// Upstream's example DataVolumes (manifests/example/import-kubevirt-
// datavolume.yaml and blank-image-datavolume.yaml), the URL pointing at
// the test's server.
const (
	cdiHTTPExample = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: example-import-dv
spec:
  source:
      http:
         url: %q
  pvc:
    accessModes:
      - ReadWriteOnce
    resources:
      requests:
        storage: "500Mi"
`
	cdiBlankExample = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: example-blank-dv
spec:
  source:
      blank: {}
  pvc:
    accessModes:
      - ReadWriteOnce
    resources:
      requests:
        storage: "500Mi"
`
	cdiStorageDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: %s
spec:
  source:
    http:
      url: %q
  storage:
    resources:
      requests:
        storage: %s
`
)

func applyYAML(t *testing.T, name, body string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".yaml")
	require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
}

// diskImage is a DataVolume's disk.img in the hostpath pool.
func diskImage(t *testing.T, dv string) string {
	t.Helper()
	pv := jsonpath(t, "pvc/"+dv, "{.spec.volumeName}")
	require.NotEmpty(t, pv)
	return filepath.Join(hostpathPool(t), "csi", pv, "disk.img")
}

// TestCDIImport: CDI's DataVolumes on the cluster, from an HTTP server the
// test runs: upstream's http (qcow2) and blank examples succeed and the
// PVC holds what qemu-img makes of the qcow2; a 1 GiB sparse image shows
// its progress between 0 and 100%; a 404 and a corrupt qcow2 say so in
// the Running condition, are retried (restartCount), and leave no pod
// once deleted; a DataVolume with two sources is refused naming the field.
func TestCDIImport(t *testing.T) {
	freshNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "dv,pvc,pods", "-o", "wide")
			t.Logf("CDI at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", ns, "get", "dv", "-o", "yaml")
			t.Logf("DataVolumes at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "cdi", "logs", "deploy/cdi-deployment", "--tail=60")
			t.Logf("cdi-controller:\n%s", out)
		}
	})
	out, err := run(t, "cluster/images.sh", "cdi-e2e-http")
	require.NoError(t, err, out)

	// The images, made here on the node.
	dir := t.TempDir()
	raw := make([]byte, 64<<20)
	copy(raw, "kubevmm CDI e2e image")
	for i := range 1 << 20 {
		raw[40<<20+i] = byte(i*13 + 5)
	}
	rawPath := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(rawPath, raw, 0o600))
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, filepath.Join(dir, "disk.qcow2"))
	converted := filepath.Join(t.TempDir(), "converted.raw")
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", filepath.Join(dir, "disk.qcow2"), converted)
	want, err := os.ReadFile(converted)
	require.NoError(t, err)
	corrupt := append([]byte("QFI\xfb\x00\x00\x00\x03"), bytes.Repeat([]byte{0xff}, 4096)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "corrupt.qcow2"), corrupt, 0o600))
	big, err := os.Create(filepath.Join(dir, "big.raw"))
	require.NoError(t, err)
	_, err = big.WriteAt([]byte("the first bytes of a 1 GiB sparse image"), 0)
	require.NoError(t, err)
	_, err = big.WriteAt([]byte("its last bytes"), 1<<30-14)
	require.NoError(t, err)
	require.NoError(t, big.Close())

	applyYAML(t, "images", fmt.Sprintf(cdiServer, dir))
	wait(t, "pod/images", "condition=Ready", 3*time.Minute)
	base := "http://" + jsonpath(t, "pod/images", "{.status.podIP}") + ":8080"

	t.Run("two sources are refused", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "two.yaml")
		require.NoError(t, os.WriteFile(f, []byte(strings.Replace(cdiBlankExample, "blank: {}", "blank: {}\n      http: {url: \"http://x\"}", 1)), 0o600))
		out, err := run(t, "kubectl.sh", "-n", ns, "apply", "-f", f)
		require.Error(t, err, out)
		assert.Contains(t, out, "spec.source must set exactly one source")
	})

	applyYAML(t, "http-example", fmt.Sprintf(cdiHTTPExample, base+"/disk.qcow2"))
	applyYAML(t, "blank-example", cdiBlankExample)
	applyYAML(t, "big", fmt.Sprintf(cdiStorageDV, "big", base+"/slow/big.raw", "1Gi"))

	t.Run("progress", func(t *testing.T) {
		// Read as a user would, until it ends; some reading must fall
		// strictly between 0 and 100.
		var seen []string
		deadline := time.Now().Add(10 * time.Minute)
		for time.Now().Before(deadline) {
			p := jsonpath(t, "dv/big", "{.status.phase} {.status.progress}")
			if len(seen) == 0 || seen[len(seen)-1] != p {
				seen = append(seen, p)
			}
			if strings.HasPrefix(p, "Succeeded") {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("phases and progress seen: %q", seen)
		between := false
		for _, s := range seen {
			if v, ok := strings.CutPrefix(s, "ImportInProgress "); ok {
				f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
				between = between || (err == nil && f > 0 && f < 100)
			}
		}
		assert.True(t, between, "a progress strictly between 0 and 100%%")
		require.Equal(t, "Succeeded 100.0%", seen[len(seen)-1])
		img := diskImage(t, "big")
		st, err := os.Stat(img)
		require.NoError(t, err)
		assert.Equal(t, int64(1<<30), st.Size())
		assert.Less(t, st.Sys().(*syscall.Stat_t).Blocks*512, int64(16<<20), "sparse")
	})

	t.Run("upstream examples", func(t *testing.T) {
		for _, dv := range []string{"example-import-dv", "example-blank-dv"} {
			wait(t, "dv/"+dv, "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
			assert.Equal(t, "True", jsonpath(t, "dv/"+dv, `{.status.conditions[?(@.type=="Ready")].status}`))
			assert.Equal(t, "100.0%", jsonpath(t, "dv/"+dv, "{.status.progress}"))
		}
		got, err := os.ReadFile(diskImage(t, "example-import-dv"))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "disk.img is qemu-img convert's raw image of the qcow2")
		st, err := os.Stat(diskImage(t, "example-blank-dv"))
		require.NoError(t, err)
		assert.Equal(t, int64(470<<20), st.Size(), "500Mi less the 6% filesystem overhead")
	})

	t.Run("failures", func(t *testing.T) {
		applyYAML(t, "missing", fmt.Sprintf(cdiStorageDV, "missing", base+"/missing.qcow2", "100Mi"))
		applyYAML(t, "corrupt", fmt.Sprintf(cdiStorageDV, "corrupt", base+"/corrupt.qcow2", "100Mi"))
		for dv, msg := range map[string]string{"missing": "GET " + base + "/missing.qcow2: HTTP 404 Not Found",
			"corrupt": "the qcow2 image from " + base + "/corrupt.qcow2"} {
			// Restarted at least once (the kubelet's back-off decides when).
			for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
				if n, _ := strconv.Atoi(jsonpath(t, "dv/"+dv, "{.status.restartCount}")); n > 0 {
					break
				}
			}
			n, _ := strconv.Atoi(jsonpath(t, "dv/"+dv, "{.status.restartCount}"))
			require.Positive(t, n, "%s: restartCount", dv)
			cond := jsonpath(t, "dv/"+dv, `{.status.conditions[?(@.type=="Running")].message}`)
			assert.Contains(t, cond, msg, dv)
			assert.Equal(t, "ImportInProgress", jsonpath(t, "dv/"+dv, "{.status.phase}"), dv)
		}
		kubectl(t, "-n", ns, "delete", "dv/missing", "dv/corrupt", "--wait=true", "--timeout=180s")
		kubectl(t, "-n", ns, "wait", "--for=delete", "pod/importer-missing", "pod/importer-corrupt", "pvc/missing", "pvc/corrupt", "--timeout=180s")
		assert.Empty(t, kubectl(t, "-n", ns, "get", "pods", "-l", "app=containerized-data-importer", "-o", "name"), "no importer pods left")
	})
}
