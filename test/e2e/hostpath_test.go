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
kind: Pod
metadata: {name: volume-user}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: localhost/kubevmm/pause:devel
    imagePullPolicy: Never
    volumeMounts: [{name: fs, mountPath: /data}]
    volumeDevices: [{name: blk, devicePath: /dev/xvdb}]
  volumes:
  - {name: fs, persistentVolumeClaim: {claimName: fs-claim}}
  - {name: blk, persistentVolumeClaim: {claimName: block-claim}}
`

// TestHostPathProvisioner: two claims of the hostpath provisioner's
// classes, a Filesystem one (of the default class) and a Block one, used
// by a pod. The scheduler picks the node, the provisioner there creates
// the volumes in its pool, and the kubelet publishes them through the
// driver it registered: the pod's writes land in the pool. The block
// volume grows while in use. Deleting the pod and the claims removes the
// volumes from the pool.
func TestHostPathProvisioner(t *testing.T) {
	freshNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", ns, "get", "pvc,pods,events", "-o", "wide")
			t.Logf("claims at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "hostpath-provisioner", "logs", "ds/hostpath-provisioner", "--tail=60")
			t.Logf("hostpath-provisioner:\n%s", out)
		}
	})
	pool := hostpathPool(t)
	f := filepath.Join(t.TempDir(), "hostpath.yaml")
	require.NoError(t, os.WriteFile(f, []byte(hostpathManifest), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
	wait(t, "pod/volume-user", "condition=Ready", 3*time.Minute)

	node := jsonpath(t, "pod/volume-user", "{.spec.nodeName}")
	assert.Equal(t, "hostpath-csi", jsonpath(t, "pvc/fs-claim", "{.spec.storageClassName}"), "the default class")
	vols := map[string]string{}
	for _, c := range []string{"fs-claim", "block-claim"} {
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
	kubectl(t, "-n", ns, "delete", "pvc/fs-claim", "pvc/block-claim", "--wait=true", "--timeout=120s")
	for _, pv := range vols {
		kubectl(t, "wait", "--for=delete", "pv/"+pv, "--timeout=120s")
		_, err := os.Lstat(filepath.Join(pool, "csi", pv))
		assert.ErrorIs(t, err, os.ErrNotExist, "the volume is removed from the pool")
	}
}

// hostpathPool is the pool "local" of the deployed provisioner, from its
// DaemonSet's arguments.
func hostpathPool(t *testing.T) string {
	t.Helper()
	args := kubectl(t, "-n", "hostpath-provisioner", "get", "ds/hostpath-provisioner", "-o", "jsonpath={.spec.template.spec.containers[0].args[*]}")
	for _, a := range strings.Fields(args) {
		if p, ok := strings.CutPrefix(a, "--storage-pool=local="); ok {
			return p
		}
	}
	t.Fatalf("no --storage-pool=local= in the provisioner's arguments %q", args)
	return ""
}
