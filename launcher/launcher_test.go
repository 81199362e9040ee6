package launcher

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

func testVMI() *v1.VirtualMachineInstance {
	g := resource.MustParse("128Mi")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns", UID: "0a7d2c1e-uid"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				CPU:    &v1.CPU{Cores: 2},
				Memory: &v1.Memory{Guest: &g},
				Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{KernelArgs: "console=ttyS0",
					Container: &v1.KernelBootContainer{Image: "img", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initrd"}}},
				Devices: v1.Devices{
					Disks:      []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{}}}},
					Interfaces: []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}},
				},
			},
			Networks: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
			Volumes:  []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk"}}}},
		},
	}
}

func testPaths(t *testing.T) Paths {
	d := t.TempDir()
	p := Paths{SocketDir: filepath.Join(d, "sockets"), KernelBootDir: filepath.Join(d, "kb"),
		ContainerDiskDir: filepath.Join(d, "disks"), RunDir: filepath.Join(d, "run"), SysClassNet: filepath.Join(d, "net"),
		CloudInitDir: filepath.Join(d, "cloud-init"), SecretDir: filepath.Join(d, "secrets")}
	for _, dir := range []string{p.SocketDir, p.KernelBootDir, p.ContainerDiskDir, p.SysClassNet} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestBuildVMConfig(t *testing.T) {
	p := testPaths(t)
	c, err := BuildVMConfig(testVMI(), p)
	if err != nil {
		t.Fatal(err)
	}
	if c.CPUs != 2 || c.MemoryMiB != 128 {
		t.Errorf("cpus %d memory %d MiB, want 2 and 128", c.CPUs, c.MemoryMiB)
	}
	if c.Kernel != filepath.Join(p.KernelBootDir, vmispec.KernelFile) || c.Initrd != filepath.Join(p.KernelBootDir, vmispec.InitrdFile) {
		t.Errorf("kernel %s initrd %s", c.Kernel, c.Initrd)
	}
	if !strings.HasPrefix(c.Cmdline, "console=ttyS0 ip=10.0.2.2::10.0.2.1:") {
		t.Errorf("cmdline %q: want the kernelArgs and the masquerade address", c.Cmdline)
	}
	if len(c.Disks) != 1 || c.Disks[0].Path != filepath.Join(p.ContainerDiskDir, "root.img") {
		t.Errorf("disks %+v", c.Disks)
	}
	if len(c.NICs) != 1 || c.NICs[0].Tap != "tap0" || c.NICs[0].MAC[0] != 0x02 {
		t.Errorf("nics %+v", c.NICs)
	}

	// The files: a raw disk and a qcow2 one are told apart by their header.
	os.WriteFile(c.Kernel, []byte("kernel"), 0o644)
	os.WriteFile(c.Initrd, []byte("initrd"), 0o644)
	os.WriteFile(c.Disks[0].Path, append([]byte{'Q', 'F', 'I', 0xfb}, make([]byte, 60)...), 0o644)
	mc, err := c.MachineConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(mc.Kernel) != "kernel" || string(mc.Initrd) != "initrd" || mc.Disks[0].Format != "qcow2" || mc.NICs[0].Tap != "tap0" {
		t.Errorf("machine config %+v", mc)
	}
	if mc.Vsock == nil || mc.Vsock.CID != vmispec.GuestCID || mc.Vsock.Socket != filepath.Join(p.SocketDir, vmispec.VsockSocket) {
		t.Errorf("vsock %+v: want CID %d on the socket directory's %s", mc.Vsock, vmispec.GuestCID, vmispec.VsockSocket)
	}
	// autoattachVSOCK: the guest gets the CID virt-controller allocated
	vmi := testVMI()
	vmi.Status.VSOCKCID = ptr.To(uint32(1234))
	if c, err = BuildVMConfig(vmi, p); err != nil {
		t.Fatal(err)
	}
	if mc, err = c.MachineConfig(nil); err != nil {
		t.Fatal(err)
	}
	if mc.Vsock == nil || mc.Vsock.CID != 1234 {
		t.Errorf("vsock %+v: want the VMI's status.VSOCKCID 1234", mc.Vsock)
	}

	vmi = testVMI()
	vmi.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSATA
	vmi.Spec.Domain.Devices.Interfaces[0].Model = "e1000"
	c, err = BuildVMConfig(vmi, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MachineConfig(nil); err == nil {
		t.Error("the VMM accepted a SATA disk")
	}
	qc, err := c.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	if err != nil {
		t.Fatal(err)
	}
	if qc.Disks[0].Bus != qemu.BusSATA || qc.NICs[0].Model != qemu.NICE1000 || qc.SerialSocket == "" {
		t.Errorf("qemu config %+v", qc)
	}
	if _, err := qc.Args(); err != nil {
		t.Errorf("QEMU refuses the config: %v", err)
	}

	vmi = testVMI()
	vmi.Spec.Volumes[0].ContainerDisk = nil
	if _, err := BuildVMConfig(vmi, p); err == nil {
		t.Error("a disk without a supported volume was accepted")
	}
}

// networkInterfaceMultiqueue and blockMultiQueue give the pod NIC and each
// virtio disk one queue per vCPU, on the VMM and in QEMU alike; a SATA
// disk keeps its one.
func TestBuildVMConfigMultiQueue(t *testing.T) {
	p := testPaths(t)
	vmi := testVMI()
	vmi.Spec.Domain.Devices.NetworkInterfaceMultiQueue = ptr.To(true)
	vmi.Spec.Domain.Devices.BlockMultiQueue = ptr.To(true)
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks,
		v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}})
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "d"}}})
	c, err := BuildVMConfig(vmi, p)
	require.NoError(t, err)
	require.Len(t, c.NICs, 1)
	assert.Equal(t, 2, c.NICs[0].Queues)
	require.Len(t, c.Disks, 2)
	assert.Equal(t, 2, c.Disks[0].Queues)
	assert.Equal(t, 0, c.Disks[1].Queues, "a SATA disk")

	os.WriteFile(c.Kernel, []byte("kernel"), 0o644)
	os.WriteFile(c.Initrd, []byte("initrd"), 0o644)
	for _, d := range c.Disks {
		os.WriteFile(d.Path, make([]byte, 4096), 0o644)
	}
	qc, err := c.QEMUConfig(p, filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	require.NoError(t, err)
	assert.Equal(t, 2, qc.NICs[0].Queues)
	assert.Equal(t, []int{2, 0}, []int{qc.Disks[0].Queues, qc.Disks[1].Queues})

	c.Disks = c.Disks[:1] // the VMM has no SATA
	mc, err := c.MachineConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, 2, mc.NICs[0].Queues)
	assert.Equal(t, 2, mc.Disks[0].Queues)
}

// TestPrepareWritesCloudInitDisk: the launcher renders the cloud-init
// volume at start and attaches it read-only, in the VMI's disk order.
func TestPrepareWritesCloudInitDisk(t *testing.T) {
	p := testPaths(t)
	vmi := testVMI()
	vmi.Spec.Domain.Devices.Disks = append([]v1.Disk{{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}, vmi.Spec.Domain.Devices.Disks...)
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{
		CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}})
	b, err := json.Marshal(vmi)
	if err != nil {
		t.Fatal(err)
	}
	vmiFile := filepath.Join(t.TempDir(), "vmi.json")
	if err := os.WriteFile(vmiFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, _, cfg, err := prepare(Options{VMIFile: vmiFile, Paths: p}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(p.CloudInitDir, "ci.img")
	if len(cfg.Disks) != 2 || cfg.Disks[0].Path != want || !cfg.Disks[0].ReadOnly || cfg.Disks[1].Name != "root" {
		t.Fatalf("disks %+v: want the cloud-init disk first, read-only", cfg.Disks)
	}
	img, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(img) < 512 || string(img[54:62]) != "FAT12   " || string(img[43:49]) != "cidata" {
		t.Errorf("%s is no cidata vfat image", want)
	}

	vmi.Spec.Volumes[1].CloudInitNoCloud.UserDataBase64, vmi.Spec.Volumes[1].CloudInitNoCloud.UserData = "!", ""
	b, _ = json.Marshal(vmi)
	os.WriteFile(vmiFile, b, 0o644)
	if _, _, _, _, err := prepare(Options{VMIFile: vmiFile, Paths: p}, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "userDataBase64") {
		t.Errorf("bad user data: err %v, want it named", err)
	}
}

func TestCopyFiles(t *testing.T) {
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "disk"), 0o755)
	os.WriteFile(filepath.Join(d, "disk", "img.qcow2"), []byte("disk"), 0o644)
	os.WriteFile(filepath.Join(d, "k"), []byte("kernel"), 0o644)
	if err := CopyFiles([]string{filepath.Join(d, "disk"), filepath.Join(d, "out", "d.img"), filepath.Join(d, "k"), filepath.Join(d, "out", "kernel")}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"d.img": "disk", "kernel": "kernel"} {
		if b, _ := os.ReadFile(filepath.Join(d, "out", f)); string(b) != want {
			t.Errorf("%s = %q", f, b)
		}
	}
	os.WriteFile(filepath.Join(d, "disk", "second"), nil, 0o644)
	if err := CopyFiles([]string{filepath.Join(d, "disk"), filepath.Join(d, "x")}); err == nil {
		t.Error("a directory with two files was accepted")
	}
	if err := CopyFiles([]string{"only-one"}); err == nil {
		t.Error("an odd argument count was accepted")
	}
}

// TestRunWaitsForNetwork runs the launcher for a VMI whose tap never
// appears: its control socket answers Starting (that is how virt-handler
// finds it), and SIGTERM (ctx) ends it cleanly with the end recorded.
func TestRunWaitsForNetwork(t *testing.T) {
	p := testPaths(t)
	vmi := testVMI()
	vmi.Spec.Domain.Devices.Disks, vmi.Spec.Volumes = nil, nil
	b, _ := json.Marshal(vmi)
	vmiFile := filepath.Join(t.TempDir(), "vmi.json")
	os.WriteFile(vmiFile, b, 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	var log strings.Builder
	go func() {
		code, err := Run(ctx, Options{VMIFile: vmiFile, Paths: p, Log: &lockedWriter{b: &log}})
		done <- result{code, err}
	}()

	c := api.NewClient(filepath.Join(p.SocketDir, vmispec.ControlSocket))
	var info api.Info
	for {
		// The socket appears when the launcher is up; until then the
		// client's dial fails.
		i, err := c.Info(context.Background())
		if err == nil {
			info = i
			break
		}
		select {
		case r := <-done:
			t.Fatalf("launcher ended early: %d %v", r.code, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if info.State != StateStarting || info.Backend != "kubevmm" {
		t.Fatalf("info %+v, want Starting on kubevmm", info)
	}
	if err := c.Pause(context.Background()); err == nil {
		t.Error("pausing a VM that has not started succeeded")
	}
	cancel()
	r := <-done
	if r.code != 0 || r.err != nil {
		t.Fatalf("launcher ended with %d %v", r.code, r.err)
	}
	rec, err := os.ReadFile(filepath.Join(p.SocketDir, vmispec.ExitFile))
	if err != nil {
		t.Fatalf("no exit record: %v", err)
	}
	var end api.Info
	json.Unmarshal(rec, &end)
	if end.State != api.StateStopped {
		t.Errorf("exit record %+v, want Stopped", end)
	}
}

type lockedWriter struct{ b *strings.Builder }

func (w *lockedWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestRunRefusesABadSeccompAnnotation(t *testing.T) {
	vmi := testVMI()
	vmi.Annotations = map[string]string{vmispec.SeccompAnnotation: "strict"}
	b, err := json.Marshal(vmi)
	if err != nil {
		t.Fatal(err)
	}
	vmiFile := filepath.Join(t.TempDir(), "vmi.json")
	if err := os.WriteFile(vmiFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Refused before anything runs (and before any filter is installed
	// in this test process).
	code, err := Run(context.Background(), Options{VMIFile: vmiFile, Paths: testPaths(t), Log: &lockedWriter{}, Seccomp: true})
	if code != 1 || err == nil || !strings.Contains(err.Error(), vmispec.SeccompAnnotation) || !strings.Contains(err.Error(), "want off, log or kill") {
		t.Fatalf("Run = %d, %v; want 1 and an error naming the annotation", code, err)
	}
}

// TestPrepareDiskBoot: a VMI without kernelBoot whose boot disk's image
// has a Linux boot entry runs on our VMM, booting that entry (its options
// before the launcher's command line); without an entry it goes to QEMU,
// and the reason, which the control API reports, names what is missing.
func TestPrepareDiskBoot(t *testing.T) {
	withEntry := disktest.Build(t, disktest.Disk{Label: "gpt", Parts: []disktest.Part{
		disktest.BLSPart("6.1", []byte("the kernel"), []byte("the initrd"), "root=/dev/vda1 quiet"),
	}})
	noEntry := disktest.Build(t, disktest.Disk{Label: "gpt", Parts: []disktest.Part{{Files: map[string][]byte{"etc/fstab": nil}}}})
	for _, tc := range []struct {
		name, image string
		want        vmispec.Backend
		why         string
	}{
		{"entry", withEntry, vmispec.BackendKubevmm, "boots its disk's Linux boot entry"},
		{"no entry", noEntry, vmispec.BackendQEMU, "domain.devices.disks[0]: the boot disk root has no Linux boot entry the kubevmm VMM can boot (booting it needs firmware): raw image: no boot entry (no loader/entries/*.conf, grub.cfg or vmlinuz-*) on partition 1 (ext4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPaths(t)
			vmi := testVMI()
			vmi.Spec.Domain.Firmware = nil
			b, err := json.Marshal(vmi)
			require.NoError(t, err)
			vmiFile := filepath.Join(t.TempDir(), "vmi.json")
			require.NoError(t, os.WriteFile(vmiFile, b, 0o644))
			img, err := os.ReadFile(tc.image)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(p.ContainerDiskDir, "root.img"), img, 0o644))

			_, backend, why, cfg, err := prepare(Options{VMIFile: vmiFile, Paths: p}, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			assert.Equal(t, tc.want, backend)
			assert.Contains(t, why, tc.why)
			assert.Equal(t, why, (&switchVM{name: string(backend), reason: why}).Info().BackendReason, "the control API says why")
			if backend != vmispec.BackendKubevmm {
				assert.Nil(t, cfg.DiskBoot)
				return
			}
			mc, err := cfg.MachineConfig(nil)
			require.NoError(t, err)
			assert.Equal(t, "the kernel", string(mc.Kernel))
			assert.Equal(t, "the initrd", string(mc.Initrd))
			assert.Regexp(t, `^root=/dev/vda1 quiet console=ttyS0 .* ip=10\.0\.2\.2::10\.0\.2\.1:`, mc.Cmdline)
			assert.Equal(t, filepath.Join(p.ContainerDiskDir, "root.img"), mc.Disks[0].Path, "the boot disk is a disk too")
		})
	}
}
