package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/storage/cdi/registry"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

// The dev registry (hack/cluster/registry.sh): the node IP, port 5000,
// TLS from the cluster CA.
const devRegistry = "10.200.0.1:5000"

const registryDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata:
  name: %s
spec:
  source:
    registry:
      url: %q
      pullMethod: %s
%s  storage:
    resources:
      requests:
        storage: %d
`

const registryVMI = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: registry-disk
spec:
  terminationGracePeriodSeconds: 5
  domain:
    memory:
      guest: 128Mi
    devices:
      disks:
      - name: rootdisk
        disk:
          bus: virtio
  volumes:
  - name: rootdisk
    containerDisk:
      image: %s
`

// TestCDIRegistry: the test guest's boot disk (qcow2) pushed as a
// containerDisk to the dev registry; DataVolumes with source.registry,
// pullMethod pod (with certConfigMap) and node (containerd pulls, trusting
// the registry through its hosts.toml), both Succeed with what qemu-img
// convert makes of the qcow2; an unreachable registry is a Running
// condition that says so, retried, and leaves no pod once deleted; a VMI
// whose containerDisk is the registry image runs (containerd pulls it,
// IfNotPresent by default).
func TestCDIRegistry(t *testing.T) {
	freshNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "dv,pvc,pods", "-o", "wide")
			t.Logf("CDI at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", ns, "get", "dv", "-o", "yaml")
			t.Logf("DataVolumes at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", ns, "describe", "pods")
			t.Logf("pods at failure:\n%s", out)
		}
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
	// hack/cluster/guest-disk.sh (make e2e) built it.
	qcow := filepath.Join(cache, "images", "guest.qcow2")
	converted := filepath.Join(t.TempDir(), "converted.raw")
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", qcow, converted)
	want, err := os.ReadFile(converted)
	require.NoError(t, err)

	// Pushed with what hack/containerdisk runs, to the registry's address.
	image := devRegistry + "/kubevmm/test-bootdisk:e2e"
	c, err := registry.New(registry.Options{CAs: [][]byte{ca}})
	require.NoError(t, err)
	ref, err := registry.ParseImage(image)
	require.NoError(t, err)
	f, err := os.Open(qcow)
	require.NoError(t, err)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pushed, err := c.PushContainerDisk(ctx, ref, "guest.qcow2", f)
	require.NoError(t, err)
	d, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, pushed, d)

	size := int64(len(want)) + 64<<20
	kubectl(t, "-n", ns, "create", "configmap", "registry-ca", "--from-file=ca.crt="+caPath)
	applyYAML(t, "dv-pod", fmt.Sprintf(registryDV, "registry-pod", "docker://"+devRegistry+"/kubevmm/test-bootdisk@"+d, "pod", "      certConfigMap: registry-ca\n", size))
	// By digest too: containerd keeps the images it pulled across dev
	// clusters, and guest-disk.sh remakes the disk (new filesystem UUIDs)
	// each e2e, so the tag would name last run's image on the node.
	applyYAML(t, "dv-node", fmt.Sprintf(registryDV, "registry-node", "docker://"+devRegistry+"/kubevmm/test-bootdisk@"+d, "node", "", size))
	applyYAML(t, "dv-down", fmt.Sprintf(registryDV, "registry-down", "docker://10.200.0.1:5999/kubevmm/none:v1", "pod", "", int64(64<<20)))
	applyYAML(t, "vmi", fmt.Sprintf(registryVMI, image))

	t.Run("imports", func(t *testing.T) {
		for _, dv := range []string{"registry-pod", "registry-node"} {
			wait(t, "dv/"+dv, "jsonpath={.status.phase}=Succeeded", 5*time.Minute)
			got, err := os.ReadFile(diskImage(t, dv))
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(got), len(want), dv)
			assert.True(t, bytes.Equal(want, got[:len(want)]), "%s: disk.img is qemu-img convert's raw image of the qcow2", dv)
			assert.Empty(t, bytes.Trim(got[len(want):], "\x00"), "%s: zeros past the image", dv)
		}
	})
	t.Run("unreachable registry", func(t *testing.T) {
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			if n, _ := strconv.Atoi(jsonpath(t, "dv/registry-down", "{.status.restartCount}")); n > 0 {
				break
			}
		}
		n, _ := strconv.Atoi(jsonpath(t, "dv/registry-down", "{.status.restartCount}"))
		require.Positive(t, n, "restartCount")
		cond := jsonpath(t, "dv/registry-down", `{.status.conditions[?(@.type=="Running")].message}`)
		assert.Contains(t, cond, "10.200.0.1:5999")
		assert.Contains(t, cond, "connection refused")
		kubectl(t, "-n", ns, "delete", "dv/registry-down", "--wait=true", "--timeout=180s")
		kubectl(t, "-n", ns, "wait", "--for=delete", "pod/importer-registry-down", "--timeout=180s")
	})
	t.Run("VMI from the registry", func(t *testing.T) {
		wait(t, "vmi/registry-disk", "jsonpath={.status.phase}=Running", 8*time.Minute)
		var pods struct {
			Items []struct {
				Spec struct {
					InitContainers []struct{ Image, ImagePullPolicy string }
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by", "-o", "json")), &pods))
		var seen []string
		for _, p := range pods.Items {
			for _, c := range p.Spec.InitContainers {
				seen = append(seen, c.Image+" "+c.ImagePullPolicy)
			}
		}
		assert.Contains(t, seen, image+" IfNotPresent", "the containerDisk comes from the registry, pulled IfNotPresent")
		kubectl(t, "-n", ns, "delete", "vmi", "registry-disk", "--wait=true", "--timeout=120s")
	})
}
