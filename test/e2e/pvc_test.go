package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pvcClaims = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: fs-disk}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: blk-disk}
spec:
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 32Mi}}
`

// TestPVCVolumes: a VM whose disks are a Filesystem claim, a Block claim
// (both of the default class, hostpath-csi) and an emptyDisk. The
// launcher makes the Filesystem claim's disk.img, which lands in the
// provisioner's pool; the guest writes a marker at the start of each
// claim's disk, and after a restart (a new VMI and launcher pod) reads
// both back. The emptyDisk shows its capacity. The claims are RWO, so
// the VMI is not live-migratable, and the condition names the volume.
// One VM, one restart: two guest boots.
func TestPVCVolumes(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-pvc")
	const vm = "pvcvm"
	f := filepath.Join(t.TempDir(), "claims.yaml")
	require.NoError(t, os.WriteFile(f, []byte(pvcClaims), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm-pvc.yaml"))
	waitIn(t, ns, "vmi/"+vm, "create", 2*time.Minute)
	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	uid := jsonpathIn(t, ns, "vmi/"+vm, "{.metadata.uid}")

	t.Run("LiveMigratable is False, naming the RWO claim", func(t *testing.T) {
		assert.Equal(t, "False", jsonpathIn(t, ns, "vmi/"+vm, `{.status.conditions[?(@.type=="LiveMigratable")].status}`))
		assert.Equal(t, "DisksNotLiveMigratable", jsonpathIn(t, ns, "vmi/"+vm, `{.status.conditions[?(@.type=="LiveMigratable")].reason}`))
		assert.Contains(t, jsonpathIn(t, ns, "vmi/"+vm, `{.status.conditions[?(@.type=="LiveMigratable")].message}`), "volume fs: PVC fs-disk is not shared")
	})

	pool := hostpathPool(t)
	pv := jsonpathIn(t, ns, "pvc/fs-disk", "{.spec.volumeName}")
	img := filepath.Join(pool, "csi", pv, "disk.img")
	t.Run("the Filesystem claim's disk.img is in the pool, at the claim's size", func(t *testing.T) {
		fi, err := os.Stat(img)
		require.NoError(t, err)
		assert.Equal(t, int64(64<<20), fi.Size())
	})

	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	// The markers are computed by the guest's shell, so the echoed
	// command line cannot match what is waited for.
	consoleRunThenIn(t, ns, vm,
		"echo FS-$((6*7)) | dd of=/dev/vda conv=fsync 2>/dev/null && echo BLK-$((6*7)) | dd of=/dev/vdb conv=fsync 2>/dev/null && echo WROTE-$((1+1))",
		"WROTE-2", nil, "", 3*time.Minute)
	out := consoleRunThenIn(t, ns, vm, "echo SECTORS=$(cat /sys/block/vdc/size)-DONE-$((2+3))", "DONE-5", nil, "", time.Minute)
	assert.Contains(t, out, "SECTORS=32768-DONE-5", "the 16Mi emptyDisk")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "FS-42\n"), "the guest's write is in the pool's disk.img")

	virtctlIn(t, ns, "restart", vm)
	// The old VMI goes away first, so `kubectl wait` (which fails on a
	// missing object) can't watch for the new one: poll for it.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", vm, "-o", "jsonpath={.metadata.uid}")
		if err == nil && out != "" && out != uid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new VMI after the restart; last seen: %s %v", out, err)
		}
		time.Sleep(2 * time.Second)
	}
	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	out = consoleRunThenIn(t, ns, vm,
		"echo READ-$(dd if=/dev/vda bs=6 count=1 2>/dev/null)-$(dd if=/dev/vdb bs=7 count=1 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-FS-42-BLK-42-END-5", "both claims kept what the guest wrote before the restart")
}

const rwxClaims = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: rwx-fs}
spec:
  storageClassName: hostpath-csi-shared
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: rwx-blk}
spec:
  storageClassName: hostpath-csi-shared
  volumeMode: Block
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 32Mi}}
`

// TestPVCLiveMigration: a VM on a Filesystem and a Block ReadWriteMany
// claim (hostpath-csi-shared: volumes shared by the pods of their node)
// is LiveMigratable and migrates (on its node: the dev cluster has one).
// The guest writes a marker to each disk before, and another after: both
// are in the pool's files, so the target's VMM writes the same volumes.
// One guest boot.
func TestPVCLiveMigration(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-pvc-rwx")
	const vm = "rwxvm"
	f := filepath.Join(t.TempDir(), "claims.yaml")
	require.NoError(t, os.WriteFile(f, []byte(rwxClaims), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm-pvc-rwx.yaml"))
	waitIn(t, ns, "vmi/"+vm, "create", 2*time.Minute)
	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	// virt-controller sets LiveMigratable once it has seen the claims.
	cond := `{.status.conditions[?(@.type=="LiveMigratable")].status} {.status.conditions[?(@.type=="LiveMigratable")].message}`
	for deadline := time.Now().Add(time.Minute); !strings.HasPrefix(jsonpathIn(t, ns, "vmi/"+vm, cond), "True") && time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
	}
	require.True(t, strings.HasPrefix(jsonpathIn(t, ns, "vmi/"+vm, cond), "True"), "LiveMigratable: %s", jsonpathIn(t, ns, "vmi/"+vm, cond))

	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	consoleRunThenIn(t, ns, vm,
		"echo FS-$((6*7)) | dd of=/dev/vda conv=fsync 2>/dev/null && echo BLK-$((6*7)) | dd of=/dev/vdb conv=fsync 2>/dev/null && echo WROTE-$((1+1))",
		"WROTE-2", nil, "", 3*time.Minute)

	virtctlIn(t, ns, "migrate", vm)
	mig := strings.TrimSpace(jsonpathIn(t, ns, "vmim", "{.items[*].metadata.name}"))
	require.NotEmpty(t, mig)
	waitIn(t, ns, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
	assert.Equal(t, "true", jsonpathIn(t, ns, "vmi/"+vm, "{.status.migrationState.completed}"))

	out := consoleRunThenIn(t, ns, vm,
		"echo AFTER-$((6*7)) | dd of=/dev/vda bs=512 seek=8 conv=fsync 2>/dev/null && echo AFTER-$((6*7)) | dd of=/dev/vdb bs=512 seek=8 conv=fsync 2>/dev/null && "+
			"echo READ-$(dd if=/dev/vda bs=6 count=1 2>/dev/null)-$(dd if=/dev/vdb bs=7 count=1 2>/dev/null)-END-$((2+3))",
		"END-5", nil, "", 3*time.Minute)
	assert.Contains(t, out, "READ-FS-42-BLK-42-END-5", "the migrated guest reads its disks")

	pool := hostpathPool(t)
	for claim, first := range map[string]string{"rwx-fs": "FS-42\n", "rwx-blk": "BLK-42\n"} {
		pv := jsonpathIn(t, ns, "pvc/"+claim, "{.spec.volumeName}")
		file := filepath.Join(pool, "csi", pv)
		if claim == "rwx-fs" {
			file = filepath.Join(file, "disk.img")
		}
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Greater(t, len(b), 4096+9)
		assert.Equal(t, first, string(b[:len(first)]), "%s: the source's write", claim)
		assert.Equal(t, "AFTER-42\n", string(b[4096:4096+9]), "%s: the target's write", claim)
	}
}
