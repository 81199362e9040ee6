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

const hotplugDV = `apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: hp-data}
spec:
  source: {blank: {}}
  storage:
    resources:
      requests:
        storage: 64Mi
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: hp-block}
spec:
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
`

// TestHotplugVolume: volume hot-plug on the dev cluster, through the API
// server, virt-api (subresources, RBAC, the VMI webhook), virt-controller
// (the attachment pod that has the kubelet publish the claim on the VMI's
// node), virt-handler (which opens the published image and hands it to
// the launcher) and the VMM's SCSI controller. `virtctl addvolume
// --persist` puts a blank DataVolume into the running VMI's spec and its
// VM's template without a restart and on the same launcher pod; the
// booted guest sees a new SCSI disk (sda, its serial the volume's name),
// volumeStatus Ready with that target; the guest writes it;
// `removevolume --persist` takes it out of both specs and the guest sees
// the disk go; added again, the guest reads back what it wrote. A Block
// claim is written by the guest through its device, and the write is in
// the pool's volume file. Without --persist only the VMI changes. Bad requests are refused naming what is
// wrong, and the VMI's spec stays fixed but for its hotpluggable volumes.
// One guest boot.
func TestHotplugVolume(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-hotplug")
	const vm = "testvm"
	f := filepath.Join(t.TempDir(), "dv.yaml")
	require.NoError(t, os.WriteFile(f, []byte(hotplugDV), 0o600))
	kubectl(t, "-n", ns, "apply", "-f", f)
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	waitIn(t, ns, "vmi/"+vm, "create", 2*time.Minute)
	waitIn(t, ns, "vmi/"+vm, "jsonpath={.status.phase}=Running", 5*time.Minute)
	consoleUntil(t, ns, vm, marker, 15*time.Minute)
	pod := kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+jsonpathIn(t, ns, "vmi/"+vm, "{.metadata.uid}"), "-o", "jsonpath={.items[*].metadata.uid}")

	const (
		vmiVolume = `{.spec.volumes[?(@.name=="hp-data")].dataVolume.hotpluggable}/{.spec.domain.devices.disks[?(@.name=="hp-data")].disk.bus}`
		vmVolume  = `{.spec.template.spec.volumes[?(@.name=="hp-data")].dataVolume.hotpluggable}/{.spec.template.spec.domain.devices.disks[?(@.name=="hp-data")].disk.bus}`
	)
	volumes := func() (string, string) {
		return jsonpathIn(t, ns, "vmi/"+vm, vmiVolume), jsonpathIn(t, ns, "vm/"+vm, vmVolume)
	}
	waitVolumes := func(what, wantVMI, wantVM string) {
		t.Helper()
		until(t, 2*time.Minute, what, func() bool {
			i, m := volumes()
			return i == wantVMI && m == wantVM && jsonpathIn(t, ns, "vm/"+vm, "{.status.volumeRequests}") == ""
		})
	}

	t.Run("bad requests are refused by name", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"addvolume", vm, "--volume-name=nope"}, "volumeSource.persistentVolumeClaim.claimName: PersistentVolumeClaim " + ns + "/nope not found"},
			{[]string{"addvolume", vm, "--volume-name=hp-data", "--bus=virtio"}, "--bus=virtio is not supported"},
			{[]string{"addvolume", vm, "--volume-name=hp-data", "--serial=s"}, "--serial is not supported"},
			{[]string{"removevolume", vm, "--volume-name=hp-data"}, `name: volume "hp-data": no volume of that name`},
		} {
			out, err := run(t, "virtctl.sh", append([]string{"-n", ns}, tc.args...)...)
			require.Error(t, err, "%v: %s", tc.args, out)
			assert.Contains(t, out, tc.want, "%v", tc.args)
		}
	})

	t.Run("addvolume --persist: the VMI and its VM's template", func(t *testing.T) {
		out := virtctlIn(t, ns, "addvolume", vm, "--volume-name=hp-data", "--persist")
		assert.Contains(t, out, "Successfully submitted add volume request to VM testvm for volume hp-data")
		waitVolumes("hot-plugged volume in the VMI and the VM", "true/scsi", "true/scsi")
		assert.Empty(t, jsonpathIn(t, ns, "vm/"+vm, `{.status.conditions[?(@.type=="RestartRequired")].status}`), "no restart needed")
		assert.Equal(t, "Running", jsonpathIn(t, ns, "vmi/"+vm, "{.status.phase}"))
		assert.Equal(t, pod, kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+jsonpathIn(t, ns, "vmi/"+vm, "{.metadata.uid}"), "-o", "jsonpath={.items[*].metadata.uid}"),
			"the same launcher pod")

		out, err := run(t, "virtctl.sh", "-n", ns, "addvolume", vm, "--volume-name=hp-data")
		require.Error(t, err, out)
		assert.Contains(t, out, `name: volume "hp-data": a volume or disk of that name exists`)
	})

	// ready waits for the volume to reach the guest: its attachment pod
	// runs on the VMI's node (owned by the launcher pod) and virt-handler
	// attached the published claim.
	ready := func(t *testing.T, volume string) {
		t.Helper()
		status := func(field string) string {
			return jsonpathIn(t, ns, "vmi/"+vm, `{.status.volumeStatus[?(@.name=="`+volume+`")].`+field+`}`)
		}
		until(t, 3*time.Minute, volume+" Ready", func() bool { return status("phase") == "Ready" })
		assert.Equal(t, "sda", status("target"))
		attach := status("hotplugVolume.attachPodName")
		require.NotEmpty(t, attach)
		assert.Equal(t, jsonpathIn(t, ns, "vmi/"+vm, "{.status.nodeName}"), jsonpathIn(t, ns, "pod/"+attach, "{.spec.nodeName}"))
		assert.Equal(t, "Running", jsonpathIn(t, ns, "pod/"+attach, "{.status.phase}"))
		assert.Equal(t, pod, jsonpathIn(t, ns, "pod/"+attach, `{.metadata.ownerReferences[?(@.controller==true)].uid}`), "owned by the launcher pod")
	}

	t.Run("the guest sees the new disk and writes it", func(t *testing.T) {
		// Its claim waits for a first consumer: the attachment pod is it,
		// and the kubelet publishes the volume once the pod runs.
		ready(t, "hp-data")
		// Computed by the guest's shell, so the echoed command line cannot
		// match what is waited for.
		out := consoleRunThenIn(t, ns, vm,
			"while [ ! -e /sys/block/sda/size ]; do sleep 1; done; echo SDA-$(cat /sys/block/sda/size)-$(tail -c +5 /sys/block/sda/device/vpd_pg80)-END$((1+1))",
			"END2", nil, "", 2*time.Minute)
		assert.Regexp(t, `SDA-\d+-hp-data-END2`, out, "the disk, its serial the volume's name")
		out = consoleRunThenIn(t, ns, vm,
			"echo HP-$((6*7)) | dd of=/dev/sda conv=fsync 2>/dev/null && echo WROTE-$((1+2))",
			"WROTE-3", nil, "", time.Minute)
		assert.Contains(t, out, "WROTE-3")
	})

	t.Run("the VMI's other spec stays fixed", func(t *testing.T) {
		out, err := run(t, "kubectl.sh", "-n", ns, "patch", "vmi", vm, "--type=json", "-p", `[{"op":"replace","path":"/spec/domain/memory/guest","value":"256Mi"}]`)
		require.Error(t, err, out)
		assert.Contains(t, out, "spec cannot be changed, but for its hotpluggable volumes")
	})

	t.Run("removevolume --persist: the guest sees the disk go", func(t *testing.T) {
		virtctlIn(t, ns, "removevolume", vm, "--volume-name=hp-data", "--persist")
		waitVolumes("hot-plugged volume gone from the VMI and the VM", "/", "/")
		until(t, 2*time.Minute, "no volumeStatus and no attachment pod", func() bool {
			return jsonpathIn(t, ns, "vmi/"+vm, "{.status.volumeStatus}") == "" &&
				kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io=hotplug-disk", "-o", "name") == ""
		})
		out := consoleRunThenIn(t, ns, vm, "while [ -e /sys/block/sda ]; do sleep 1; done; echo GONE-$((2+2))", "GONE-4", nil, "", 2*time.Minute)
		assert.Contains(t, out, "GONE-4")
	})

	t.Run("plugged in again: the guest reads what it wrote", func(t *testing.T) {
		virtctlIn(t, ns, "addvolume", vm, "--volume-name=hp-data", "--persist")
		waitVolumes("hot-plugged volume back in the VMI and the VM", "true/scsi", "true/scsi")
		ready(t, "hp-data")
		out := consoleRunThenIn(t, ns, vm,
			"while [ ! -e /sys/block/sda/size ]; do sleep 1; done; echo READ-$(head -c 5 /dev/sda)-END$((2+3))",
			"END5", nil, "", 2*time.Minute)
		assert.Contains(t, out, "READ-HP-42-END5")
		virtctlIn(t, ns, "removevolume", vm, "--volume-name=hp-data", "--persist")
		waitVolumes("hot-plugged volume gone again", "/", "/")
		until(t, 2*time.Minute, "no volumeStatus", func() bool { return jsonpathIn(t, ns, "vmi/"+vm, "{.status.volumeStatus}") == "" })
	})

	t.Run("a Block claim: the guest writes its device", func(t *testing.T) {
		// The claim's device is handed over as an open descriptor: the
		// launcher's container may not open the device node itself.
		virtctlIn(t, ns, "addvolume", vm, "--volume-name=hp-block")
		ready(t, "hp-block")
		out := consoleRunThenIn(t, ns, vm,
			"while [ ! -e /sys/block/sda/size ]; do sleep 1; done; echo BLK-$(cat /sys/block/sda/size)-$(tail -c +5 /sys/block/sda/device/vpd_pg80)-END$((3+4)); "+
				"echo HPB-$((6*7)) | dd of=/dev/sda conv=fsync 2>/dev/null && echo WROTE-$((2+6))",
			"WROTE-8", nil, "", 2*time.Minute)
		assert.Contains(t, out, "BLK-32768-hp-block-END7", "16Mi, its serial the volume's name")
		b, err := os.ReadFile(filepath.Join(hostpathPool(t), "csi", jsonpathIn(t, ns, "pvc/hp-block", "{.spec.volumeName}")))
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(b), "HPB-42\n"), "the guest's write is in the pool's Block volume file")
		virtctlIn(t, ns, "removevolume", vm, "--volume-name=hp-block")
		until(t, 2*time.Minute, "no volumeStatus", func() bool { return jsonpathIn(t, ns, "vmi/"+vm, "{.status.volumeStatus}") == "" })
		out = consoleRunThenIn(t, ns, vm, "while [ -e /sys/block/sda ]; do sleep 1; done; echo GONE-$((4+5))", "GONE-9", nil, "", 2*time.Minute)
		assert.Contains(t, out, "GONE-9")
	})

	t.Run("without --persist only the VMI changes", func(t *testing.T) {
		out := virtctlIn(t, ns, "addvolume", vm, "--volume-name=hp-data")
		assert.Contains(t, out, "Successfully submitted add volume request to VMI testvm for volume hp-data")
		i, m := volumes()
		assert.Equal(t, "true/scsi", i)
		assert.Equal(t, "/", m)
		virtctlIn(t, ns, "removevolume", vm, "--volume-name=hp-data")
		i, _ = volumes()
		assert.Equal(t, "/", i)
	})
}
