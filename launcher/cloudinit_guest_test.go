package launcher

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCloudInitGuest boots the test guest on the kubevmm VMM with the
// cloud-init disk the launcher renders (prepare, then the machine
// configuration the launcher gives the VMM): the guest's /init finds it by
// its contents, takes the hostname from the metadata and applies the user
// data. One boot per disk kind; each costs a minute or more of emulated
// guest kernel time on nested-KVM hosts.
func TestCloudInitGuest(t *testing.T) {
	const cloudConfig = `#cloud-config
write_files:
  - path: /etc/kubevmm/greeting
    content: |
      hello from cloud-init
      second line
runcmd:
  - cat /etc/kubevmm/greeting
`
	const script = "#!/bin/sh\necho \"script sees hostname $(cat /proc/sys/kernel/hostname)\"\n"
	for _, tc := range []struct {
		name   string
		source v1.VolumeSource
		want   []string
	}{
		{"noCloud cloud-config", v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: cloudConfig}}, []string{
			"kubevmm-guest: hostname=ci-guest\n",
			"kubevmm-guest: write_files /etc/kubevmm/greeting\n",
			"kubevmm-guest: runcmd cat /etc/kubevmm/greeting\nhello from cloud-init\nsecond line\n",
		}},
		{"configDrive script", v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: script}}, []string{
			"kubevmm-guest: hostname=ci-guest\n",
			"kubevmm-guest: user-data script\nscript sees hostname ci-guest\nkubevmm-guest: user-data script exit=0\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPaths(t)
			for src, dst := range map[string]string{guestimage.Kernel(t): vmispec.KernelFile, guestimage.Initramfs(t): vmispec.InitrdFile} {
				require.NoError(t, os.Symlink(src, filepath.Join(p.KernelBootDir, dst)))
			}
			g := resource.MustParse("128Mi")
			vmi := &v1.VirtualMachineInstance{
				ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns", UID: "0a7d2c1e-uid"},
				Spec: v1.VirtualMachineInstanceSpec{
					Hostname: "ci-guest",
					Domain: v1.DomainSpec{
						Memory: &v1.Memory{Guest: &g},
						Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{
							KernelArgs: "console=ttyS0 reboot=k panic=-1 quiet",
							Container:  &v1.KernelBootContainer{Image: "img", KernelPath: "/k", InitrdPath: "/i"}}},
						// A root disk first, as in KubeVirt's examples: the guest
						// looks past it for the cloud-init disk.
						Devices: v1.Devices{Disks: []v1.Disk{
							{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
							{Name: "ci", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
						}},
					},
					Volumes: []v1.Volume{
						{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk"}}},
						{Name: "ci", VolumeSource: tc.source},
					},
				},
			}
			root := filepath.Join(p.ContainerDiskDir, "root.img")
			require.NoError(t, os.WriteFile(root, nil, 0o644))
			require.NoError(t, os.Truncate(root, 8<<20))
			hosttools.Run(t, "mkfs.ext4", "-q", "-F", root)
			b, err := json.Marshal(vmi)
			require.NoError(t, err)
			vmiFile := filepath.Join(t.TempDir(), "vmi.json")
			require.NoError(t, os.WriteFile(vmiFile, b, 0o644))
			_, _, _, cfg, err := prepare(Options{VMIFile: vmiFile, Paths: p}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(t, err)

			con := &syncBuffer{}
			mc, err := cfg.MachineConfig(con)
			require.NoError(t, err)
			require.Len(t, mc.Disks, 2)
			require.True(t, mc.Disks[1].ReadOnly)
			m, err := machine.New(mc)
			require.NoError(t, err)
			defer m.Close()
			exit := m.Run()
			out := con.String()
			t.Logf("guest console:\n%s", out)
			require.False(t, exit.Failed(), "guest ended with %v", exit)
			// The guest's own lines, without a kernel message between them.
			var lines []string
			for _, l := range strings.Split(out, "\n") {
				if l = strings.TrimRight(l, "\r"); !strings.HasPrefix(l, "[") {
					lines = append(lines, l)
				}
			}
			guest := strings.Join(lines, "\n")
			for _, w := range tc.want {
				assert.Contains(t, guest, w)
			}
		})
	}
}
