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

	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
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

// Upstream's example DataVolumes (manifests/example/), vendored in
// testdata/cdi; the http one's URL is replaced with the test's server's.
const cirrosURL = "https://download.cirros-cloud.net/0.4.0/cirros-0.4.0-x86_64-disk.img"

func cdiExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "test/e2e/testdata/cdi", name+".yaml"))
	require.NoError(t, err)
	return string(b)
}

const (
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
	applyYAMLIn(t, ns, name, body)
}

// applyYAMLIn is applyYAML in namespace namespace.
func applyYAMLIn(t *testing.T, namespace, name, body string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), name+".yaml")
	require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
	kubectl(t, "-n", namespace, "apply", "-f", f)
}

// diskImage is a DataVolume's disk.img in the hostpath pool.
func diskImage(t *testing.T, dv string) string {
	t.Helper()
	return diskImageIn(t, ns, dv)
}

// diskImageIn is diskImage in namespace namespace.
func diskImageIn(t *testing.T, namespace, dv string) string {
	t.Helper()
	pv := jsonpathIn(t, namespace, "pvc/"+dv, "{.spec.volumeName}")
	require.NotEmpty(t, pv)
	return filepath.Join(hostpathPool(t), "csi", pv, "disk.img")
}

// requireImage: disk.img at path holds want, then zeros up to size (it
// is grown to the claim's usable size, as CDI resizes).
func requireImage(t *testing.T, path string, want []byte, size int64) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, got, int(size), "disk.img grown to the claim's usable size")
	assert.True(t, bytes.Equal(want, got[:len(want)]), "disk.img holds what qemu-img convert makes of the qcow2")
	assert.True(t, bytes.Equal(make([]byte, len(got)-len(want)), got[len(want):]), "zeros after the image")
}

// TestCDIImport: CDI's DataVolumes on the cluster, from an HTTP server the
// test runs: upstream's http (qcow2), blank and upload examples succeed
// and the PVC holds what qemu-img makes of the qcow2, grown to the claim's
// usable size; a 1 GiB sparse image shows its progress between 0 and
// 100%; a 404, an unreachable server and a corrupt qcow2 say so in the
// Running condition, are retried (restartCount), and leave no pod once
// deleted; a DataVolume with two sources or none is refused naming the
// field, one with a negative size fails naming it. The qcow2 import also
// succeeds in a namespace enforcing the restricted PodSecurity level, its
// disk.img written by user 107.
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

	blank := cdiExample(t, "blank-image-datavolume")
	for name, source := range map[string]string{"two sources": "\n      blank: {}\n      http: {url: \"http://x\"}", "no source": " {}"} {
		t.Run(name+" refused", func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "bad.yaml")
			require.NoError(t, os.WriteFile(f, []byte(strings.Replace(blank, "\n      blank: {}", source, 1)), 0o600))
			out, err := run(t, "kubectl.sh", "-n", ns, "apply", "-f", f)
			require.Error(t, err, out)
			assert.Contains(t, out, "spec.source must set exactly one source")
		})
	}

	applyYAML(t, "http-example", strings.Replace(cdiExample(t, "import-kubevirt-datavolume"), cirrosURL, base+"/disk.qcow2", 1))
	applyYAML(t, "blank-example", blank)
	applyYAML(t, "upload-example", cdiExample(t, "upload-datavolume"))
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
		// The upload example is filled as a user would: virtctl into the
		// DataVolume the manifest made.
		wait(t, "dv/upload-datavolume", "jsonpath={.status.phase}=UploadReady", 5*time.Minute)
		proxy := "https://" + kubectl(t, "-n", "cdi", "get", "svc/cdi-uploadproxy", "-o", "jsonpath={.spec.clusterIP}")
		out := virtctl(t, "image-upload", "dv", "upload-datavolume", "--no-create", "--image-path="+filepath.Join(dir, "disk.qcow2"),
			"--uploadproxy-url="+proxy, "--insecure")
		assert.Contains(t, out, "completed successfully")
		for _, dv := range []string{"my-data-volume", "blank-image-datavolume", "upload-datavolume"} {
			wait(t, "dv/"+dv, "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
			assert.Equal(t, "True", jsonpath(t, "dv/"+dv, `{.status.conditions[?(@.type=="Ready")].status}`))
		}
		for _, dv := range []string{"my-data-volume", "blank-image-datavolume"} {
			assert.Equal(t, "100.0%", jsonpath(t, "dv/"+dv, "{.status.progress}"))
		}
		// 500Mi less the 6% filesystem overhead: the images grown to it.
		requireImage(t, diskImage(t, "my-data-volume"), want, 470<<20)
		requireImage(t, diskImage(t, "upload-datavolume"), want, 470<<20)
		st, err := os.Stat(diskImage(t, "blank-image-datavolume"))
		require.NoError(t, err)
		assert.Equal(t, int64(470<<20), st.Size(), "500Mi less the 6% filesystem overhead")
	})

	t.Run("restricted namespace", func(t *testing.T) {
		// CDI's importer (with scratch space for the qcow2) is admitted
		// where the restricted PodSecurity level is enforced, and
		// writes the claim as user 107.
		const rns = "kubevmm-e2e-cdi-restricted"
		kubectl(t, "delete", "namespace", rns, "--ignore-not-found", "--wait=true", "--timeout=180s")
		kubectl(t, "create", "namespace", rns)
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := run(t, "kubectl.sh", "-n", rns, "get", "dv,pvc,pods,events", "-o", "wide")
				t.Logf("%s at failure:\n%s", rns, out)
				return
			}
			kubectl(t, "delete", "namespace", rns, "--wait=true", "--timeout=180s")
		})
		kubectl(t, "label", "namespace", rns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
		f := filepath.Join(t.TempDir(), "restricted.yaml")
		require.NoError(t, os.WriteFile(f, []byte(fmt.Sprintf(cdiStorageDV, "restricted", base+"/disk.qcow2", "100Mi")), 0o600))
		kubectl(t, "-n", rns, "apply", "-f", f)
		kubectl(t, "-n", rns, "wait", "dv/restricted", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=300s")
		pv := kubectl(t, "-n", rns, "get", "pvc/restricted", "-o", "jsonpath={.spec.volumeName}")
		require.NotEmpty(t, pv)
		img := filepath.Join(hostpathPool(t), "csi", pv, "disk.img")
		st, err := os.Stat(img)
		require.NoError(t, err)
		assert.Equal(t, uint32(podsecurity.UID), st.Sys().(*syscall.Stat_t).Uid, "disk.img's owner")
		require.GreaterOrEqual(t, st.Size(), int64(100<<20))
		requireImage(t, img, want, st.Size())
	})

	t.Run("negative size", func(t *testing.T) {
		applyYAML(t, "negative", strings.Replace(strings.Replace(blank, "500Mi", "-1Gi", 1), "name: blank-image-datavolume", "name: negative", 1))
		wait(t, "dv/negative", "jsonpath={.status.phase}=Failed", time.Minute)
		assert.Contains(t, jsonpath(t, "dv/negative", `{.status.conditions[?(@.type=="Ready")].message}`),
			"spec.pvc.resources.requests.storage must be positive, not -1Gi")
		out, _ := run(t, "kubectl.sh", "-n", ns, "get", "pvc/negative")
		assert.Contains(t, out, "NotFound", "no claim is made")
		kubectl(t, "-n", ns, "delete", "dv/negative", "--wait=true", "--timeout=60s")
	})

	t.Run("failures", func(t *testing.T) {
		applyYAML(t, "missing", fmt.Sprintf(cdiStorageDV, "missing", base+"/missing.qcow2", "100Mi"))
		applyYAML(t, "corrupt", fmt.Sprintf(cdiStorageDV, "corrupt", base+"/corrupt.qcow2", "100Mi"))
		// The server's address, a port nothing listens on.
		unreachable := strings.TrimSuffix(base, ":8080") + ":1/disk.qcow2"
		applyYAML(t, "unreachable", fmt.Sprintf(cdiStorageDV, "unreachable", unreachable, "100Mi"))
		for dv, msg := range map[string]string{"missing": "GET " + base + "/missing.qcow2: HTTP 404 Not Found",
			"corrupt": "the qcow2 image from " + base + "/corrupt.qcow2", "unreachable": "GET " + unreachable + ": "} {
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
		kubectl(t, "-n", ns, "delete", "dv/missing", "dv/corrupt", "dv/unreachable", "--wait=true", "--timeout=180s")
		kubectl(t, "-n", ns, "wait", "--for=delete", "pod/importer-missing", "pod/importer-corrupt", "pod/importer-unreachable",
			"pvc/missing", "pvc/corrupt", "pvc/unreachable", "--timeout=180s")
		out, _ := run(t, "kubectl.sh", "-n", ns, "get", "pvc", "-o", "name")
		assert.NotContains(t, out, "-scratch", "no scratch claims left")
		assert.Empty(t, kubectl(t, "-n", ns, "get", "pods", "-l", "app=containerized-data-importer", "-o", "name"), "no importer pods left")
	})
}
