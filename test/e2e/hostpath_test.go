package e2e

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
)

const hostpathManifest = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: fs-claim}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: block-claim}
spec:
  storageClassName: hostpath-csi
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: big-claim}
spec:
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: BIG}}
---
apiVersion: v1
kind: Pod
metadata: {name: volume-user}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/kubevmm/pause:devel
    imagePullPolicy: Never
    volumeMounts: [{name: fs, mountPath: /data}]
    volumeDevices: [{name: blk, devicePath: /dev/xvdb}, {name: big, devicePath: /dev/xvdc}]
  volumes:
  - {name: fs, persistentVolumeClaim: {claimName: fs-claim}}
  - {name: blk, persistentVolumeClaim: {claimName: block-claim}}
  - {name: big, persistentVolumeClaim: {claimName: big-claim}}
`

// missingPoolManifest is a class naming a pool the HostPathProvisioner
// does not have, and a claim of it.
const missingPoolManifest = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: e2e-hostpath-missing-pool}
provisioner: kubevirt.io.hostpath-provisioner
parameters: {storagePool: nowhere}
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: missing-pool-claim}
spec:
  storageClassName: e2e-hostpath-missing-pool
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
`

// TestHostPathProvisioner: the HostPathProvisioner CR (sync.sh made it:
// pool local) is Available with its pool Ready. Three claims of the
// hostpath provisioner's classes, a Filesystem one (of the default class)
// and two Block ones, used by a pod. The scheduler picks the node (where
// the pool's CSIStorageCapacity says there is room), the provisioner there
// creates the volumes in its pool, and the kubelet publishes them through
// the driver it registered: the pod's writes land in the pool. The pool's
// published capacity shrinks by the big Block volume's size, the block
// volume grows while in use. Deleting the pod and the claims removes the
// volumes from the pool and the capacity grows back. A claim of a class
// naming a pool the CR does not have gets an event naming it.
func TestHostPathProvisioner(t *testing.T) {
	freshNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "pvc,pods,events", "-o", "wide")
			t.Logf("claims at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "hostpath-provisioner", "logs", "ds/hostpath-provisioner", "--tail=60")
			t.Logf("hostpath-provisioner:\n%s", out)
			out, _ = run(t, "kubectl.sh", "get", "hostpathprovisioner", "-o", "yaml")
			t.Logf("HostPathProvisioner:\n%s", out)
		}
	})
	assert.Equal(t, "True", kubectl(t, "get", "hostpathprovisioner/hostpath-provisioner", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`))
	assert.Equal(t, "local=Ready", kubectl(t, "get", "hostpathprovisioner/hostpath-provisioner", "-o", `jsonpath={range .status.storagePoolStatuses[*]}{.name}={.phase}{end}`))
	pool := hostpathPool(t)
	node := strings.TrimSpace(kubectl(t, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"))
	before := poolCapacity(t, node)
	// Half the pool's room: the volume's file is sparse, so nothing is
	// written, but the space is promised; far more than what the rest of
	// this machine writes meanwhile, so the capacity's moves are the
	// volume's.
	big := before / 2 &^ (1<<20 - 1)
	f := filepath.Join(t.TempDir(), "hostpath.yaml")
	require.NoError(t, os.WriteFile(f, []byte(strings.Replace(hostpathManifest, "BIG", strconv.FormatInt(big, 10), 1)), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
	wait(t, "pod/volume-user", "condition=Ready", 3*time.Minute)
	assert.Equal(t, node, jsonpath(t, "pod/volume-user", "{.spec.nodeName}"))
	var during int64
	hostpathEventually(t, "the pool's capacity to shrink by the big volume", func() bool { during = poolCapacity(t, node); return during < before-big/2 })

	assert.Equal(t, "hostpath-csi", jsonpath(t, "pvc/fs-claim", "{.spec.storageClassName}"), "the default class")
	vols := map[string]string{}
	for _, c := range []string{"fs-claim", "block-claim", "big-claim"} {
		assert.Equal(t, "Bound", jsonpath(t, "pvc/"+c, "{.status.phase}"))
		pv := jsonpath(t, "pvc/"+c, "{.spec.volumeName}")
		require.NotEmpty(t, pv)
		vols[c] = pv
		assert.Equal(t, "kubevirt.io.hostpath-provisioner", kubectl(t, "get", "pv", pv, "-o", "jsonpath={.spec.csi.driver}"))
		assert.Equal(t, node, kubectl(t, "get", "pv", pv, "-o", "jsonpath={.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}"))
	}
	assert.DirExists(t, filepath.Join(pool, "csi", vols["fs-claim"]), "the Filesystem volume's directory in the pool")
	assert.Equal(t, "Block", kubectl(t, "get", "pv", vols["block-claim"], "-o", "jsonpath={.spec.volumeMode}"))
	disk := filepath.Join(pool, "csi", vols["block-claim"])
	fi, err := os.Stat(disk)
	require.NoError(t, err)
	assert.Equal(t, int64(16<<20), fi.Size())

	// The pod's view: its container's process (the sandbox's pause has no
	// volumes) sees the directory at /data and the device at /dev/xvdb.
	root := ""
	for _, pid := range podProcesses(jsonpath(t, "pod/volume-user", "{.metadata.uid}"), "pause") {
		r := filepath.Join("/proc", strconv.Itoa(pid), "root")
		if _, err := os.Stat(filepath.Join(r, "data")); err == nil {
			root = r
		}
	}
	require.NotEmpty(t, root, "the pod's container process")
	require.NoError(t, os.WriteFile(filepath.Join(root, "data", "from-pod"), []byte("written in the pod"), 0o600))
	b, err := os.ReadFile(filepath.Join(pool, "csi", vols["fs-claim"], "from-pod"))
	require.NoError(t, err)
	assert.Equal(t, "written in the pod", string(b))
	require.NoError(t, os.WriteFile(filepath.Join(pool, "csi", vols["fs-claim"], "from-pool"), []byte("written in the pool"), 0o600))
	b, err = os.ReadFile(filepath.Join(root, "data", "from-pool"))
	require.NoError(t, err)
	assert.Equal(t, "written in the pool", string(b))

	dev, err := os.OpenFile(filepath.Join(root, "dev", "xvdb"), os.O_RDWR, 0)
	require.NoError(t, err)
	msg := bytes.Repeat([]byte("kubevmm block "), 300)
	_, err = dev.WriteAt(msg, 1<<20)
	require.NoError(t, err)
	require.NoError(t, dev.Sync())
	require.NoError(t, dev.Close())
	got := make([]byte, len(msg))
	df, err := os.Open(disk)
	require.NoError(t, err)
	_, err = df.ReadAt(got, 1<<20)
	require.NoError(t, err)
	require.NoError(t, df.Close())
	assert.Equal(t, msg, got, "the pod's device writes are in the volume's file")

	// The block claim grows while the pod uses it: the file and the pod's
	// device take the new size.
	kubectl(t, "-n", ns, "patch", "pvc/block-claim", "--type=merge", "-p", `{"spec":{"resources":{"requests":{"storage":"32Mi"}}}}`)
	wait(t, "pvc/block-claim", "jsonpath={.status.capacity.storage}=32Mi", 2*time.Minute)
	assert.Equal(t, "32Mi", kubectl(t, "get", "pv", vols["block-claim"], "-o", "jsonpath={.spec.capacity.storage}"))
	fi, err = os.Stat(disk)
	require.NoError(t, err)
	assert.Equal(t, int64(32<<20), fi.Size())
	dev, err = os.Open(filepath.Join(root, "dev", "xvdb"))
	require.NoError(t, err)
	end, err := dev.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	require.NoError(t, dev.Close())
	assert.Equal(t, int64(32<<20), end, "the pod's device size")

	// Deleting them frees the space.
	kubectl(t, "-n", ns, "delete", "pod/volume-user", "--wait=true", "--timeout=120s")
	kubectl(t, "-n", ns, "delete", "pvc/fs-claim", "pvc/block-claim", "pvc/big-claim", "--wait=true", "--timeout=120s")
	for _, pv := range vols {
		kubectl(t, "wait", "--for=delete", "pv/"+pv, "--timeout=120s")
		_, err := os.Lstat(filepath.Join(pool, "csi", pv))
		assert.ErrorIs(t, err, os.ErrNotExist, "the volume is removed from the pool")
	}
	hostpathEventually(t, "the pool's capacity to grow back", func() bool { return poolCapacity(t, node) > during+big/2 })

	// A class naming a pool the CR does not have: its claim's event names
	// the pool.
	f = filepath.Join(t.TempDir(), "missing.yaml")
	require.NoError(t, os.WriteFile(f, []byte(missingPoolManifest), 0o600))
	t.Cleanup(func() {
		_, _ = run(t, "kubectl.sh", "delete", "storageclass/e2e-hostpath-missing-pool", "--ignore-not-found")
	})
	kubectl(t, "-n", ns, "apply", "-f", f)
	hostpathEventually(t, "the missing pool's event", func() bool {
		return strings.Contains(kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name=missing-pool-claim,reason=ProvisioningFailed",
			"-o", "jsonpath={.items[*].message}"), `storage pool "nowhere" is not on node`)
	})
	assert.Equal(t, "Pending", jsonpath(t, "pvc/missing-pool-claim", "{.status.phase}"))
}

// hostpathPool is the directory of pool "local" of the HostPathProvisioner.
func hostpathPool(t *testing.T) string {
	t.Helper()
	p := kubectl(t, "get", "hostpathprovisioner/hostpath-provisioner", "-o", `jsonpath={.spec.storagePools[?(@.name=="local")].path}`)
	require.True(t, strings.HasPrefix(p, "/"), "pool local's path %q", p)
	return p
}

// poolCapacity is what the CSIStorageCapacity of the default class
// (pool local) on node says, in bytes.
func poolCapacity(t *testing.T, node string) int64 {
	t.Helper()
	out := kubectl(t, "-n", "hostpath-provisioner", "get", "csistoragecapacities", "-o",
		`jsonpath={range .items[?(@.storageClassName=="hostpath-csi")]}{.nodeTopology.matchLabels.topology\.hostpath\.csi/node}={.capacity}{"\n"}{end}`)
	for _, l := range strings.Split(out, "\n") {
		if c, ok := strings.CutPrefix(l, node+"="); ok {
			q, err := resource.ParseQuantity(c)
			require.NoError(t, err, l)
			return q.Value()
		}
	}
	t.Fatalf("no CSIStorageCapacity of hostpath-csi on %s:\n%s", node, out)
	return 0
}

// hostpathEventually polls cond until it holds, with a generous bound: slowness
// is no failure, a condition that never holds is.
func hostpathEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if cond() {
			return
		}
	}
	t.Fatalf("waiting for %s: never happened", what)
}
