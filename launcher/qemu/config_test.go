package qemu

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func minimal() Config {
	return Config{Name: "vm", CPUs: 2, MemoryMiB: 256, RunDir: "/run/kubevmm/vm"}
}

// values returns every value given to flag, in order.
func values(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

func has(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

// devices decodes the JSON -device values.
func devices(t *testing.T, args []string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, v := range values(args, "-device") {
		if !strings.HasPrefix(v, "{") {
			out = append(out, map[string]any{"legacy": v})
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(v), &m), v)
		out = append(out, m)
	}
	return out
}

func TestArgs(t *testing.T) {
	t.Run("minimal", func(t *testing.T) {
		args, err := minimal().Args()
		require.NoError(t, err)
		assert.Equal(t, []string{"q35"}, values(args, "-machine"))
		assert.Equal(t, []string{"kvm"}, values(args, "-accel"))
		assert.Equal(t, []string{"host"}, values(args, "-cpu"))
		assert.Equal(t, []string{"2"}, values(args, "-smp"))
		assert.Equal(t, []string{"256M"}, values(args, "-m"))
		assert.Equal(t, []string{"none"}, values(args, "-display"))
		for _, f := range []string{"-nodefaults", "-no-user-config", "-S"} {
			assert.True(t, has(args, f), f)
		}
		for _, f := range []string{"-no-reboot", "-incoming", "-kernel", "-vnc", "-netdev", "-blockdev"} {
			assert.False(t, has(args, f), f)
		}
		assert.Equal(t, []string{"socket,id=qmp,fd=3,server=on,wait=off"}, values(args, "-chardev"))
		assert.Equal(t, []string{"chardev=qmp,mode=control"}, values(args, "-mon"))
	})

	t.Run("linux boot, serial, tcg", func(t *testing.T) {
		c := minimal()
		c.Kernel, c.Initrd, c.Cmdline = "/k/bzImage", "/k/initrd, with comma", "console=ttyS0 reboot=k"
		c.SerialSocket = "/run/a,b/serial.sock"
		c.Accel, c.NoReboot = AccelTCG, true
		args, err := c.Args()
		require.NoError(t, err)
		assert.Equal(t, []string{"tcg"}, values(args, "-accel"))
		assert.Equal(t, []string{"qemu64"}, values(args, "-cpu"))
		assert.Equal(t, []string{"/k/bzImage"}, values(args, "-kernel"))
		assert.Equal(t, []string{"/k/initrd, with comma"}, values(args, "-initrd"), "not option-parsed: no escaping")
		assert.Equal(t, []string{"console=ttyS0 reboot=k"}, values(args, "-append"))
		assert.True(t, has(args, "-no-reboot"))
		assert.Contains(t, values(args, "-chardev"), "socket,id=serial0,path=/run/a,,b/serial.sock,server=on,wait=off")
		assert.Contains(t, values(args, "-device"), "isa-serial,chardev=serial0,id=serial0-dev")
	})

	t.Run("windows-style: sata, e1000, hyperv, vnc", func(t *testing.T) {
		c := minimal()
		c.HyperV = true
		c.VNCSocket = "/run/vm/vnc.sock"
		c.Disks = []Disk{
			{Path: "/d/win.qcow2", Format: FormatQCOW2, Bus: BusSATA, Serial: "WIN-C", BootOrder: 2},
			{Path: "/d/install.iso", Bus: BusSATA, CDROM: true, BootOrder: 1},
			{Path: "/d/virtio-win.img", Bus: BusVirtio, ReadOnly: true},
		}
		c.NICs = []NIC{{Model: NICE1000, Tap: "tap0", MAC: "52:54:00:12:34:56"}, {Tap: "tap1"}}
		args, err := c.Args()
		require.NoError(t, err)

		cpu := values(args, "-cpu")[0]
		for _, f := range append(append([]string{}, hypervBase...), hypervKVM...) {
			assert.Contains(t, cpu, f)
		}
		assert.Equal(t, []string{"unix:/run/vm/vnc.sock"}, values(args, "-vnc"))

		var blockdevs []map[string]any
		for _, v := range values(args, "-blockdev") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(v), &m))
			blockdevs = append(blockdevs, m)
		}
		require.Len(t, blockdevs, 6)
		assert.Equal(t, map[string]any{"driver": "file", "filename": "/d/win.qcow2", "node-name": "disk0-file", "read-only": false}, blockdevs[0])
		assert.Equal(t, map[string]any{"driver": "qcow2", "file": "disk0-file", "node-name": "disk0", "read-only": false}, blockdevs[1])
		assert.Equal(t, true, blockdevs[2]["read-only"], "a CD-ROM is read-only")
		assert.Equal(t, "raw", blockdevs[3]["driver"])
		assert.Equal(t, true, blockdevs[5]["read-only"])

		assert.Equal(t, []map[string]any{
			{"legacy": "VGA,id=video0"},
			{"driver": "ich9-ahci", "id": "sata0"},
			{"driver": "ide-hd", "bus": "sata0.0", "drive": "disk0", "id": "disk0-dev", "serial": "WIN-C", "bootindex": 2.0},
			{"driver": "ide-cd", "bus": "sata0.1", "drive": "disk1", "id": "disk1-dev", "bootindex": 1.0},
			{"driver": "virtio-blk-pci", "drive": "disk2", "id": "disk2-dev"},
			{"driver": "e1000", "netdev": "net0", "id": "net0-dev", "mac": "52:54:00:12:34:56"},
			{"driver": "virtio-net-pci", "netdev": "net1", "id": "net1-dev"},
		}, devices(t, args))

		netdevs := values(args, "-netdev")
		require.Len(t, netdevs, 2)
		assert.JSONEq(t, `{"type":"tap","id":"net0","ifname":"tap0","script":"no","downscript":"no"}`, netdevs[0])
	})

	t.Run("multiqueue", func(t *testing.T) {
		c := minimal()
		c.Disks = []Disk{{Path: "/d/a.img", Queues: 2}, {Path: "/d/b.img", Queues: 1}}
		c.NICs = []NIC{{Tap: "tap0", Queues: 4}, {Tap: "tap1", Queues: 1}}
		args, err := c.Args()
		require.NoError(t, err)
		assert.Equal(t, []map[string]any{
			{"driver": "virtio-blk-pci", "drive": "disk0", "id": "disk0-dev", "num-queues": 2.0},
			{"driver": "virtio-blk-pci", "drive": "disk1", "id": "disk1-dev"},
			{"driver": "virtio-net-pci", "netdev": "net0", "id": "net0-dev", "mq": true, "vectors": 10.0},
			{"driver": "virtio-net-pci", "netdev": "net1", "id": "net1-dev"},
		}, devices(t, args))
		netdevs := values(args, "-netdev")
		require.Len(t, netdevs, 2)
		assert.JSONEq(t, `{"type":"tap","id":"net0","ifname":"tap0","script":"no","downscript":"no","queues":4}`, netdevs[0])
		assert.JSONEq(t, `{"type":"tap","id":"net1","ifname":"tap1","script":"no","downscript":"no"}`, netdevs[1])
	})

	t.Run("hyperv with tcg leaves out what needs KVM", func(t *testing.T) {
		c := minimal()
		c.HyperV, c.Accel = true, AccelTCG
		args, err := c.Args()
		require.NoError(t, err)
		assert.Equal(t, "qemu64,"+strings.Join(hypervBase, ","), values(args, "-cpu")[0])
	})

	t.Run("seven sata disks need two controllers", func(t *testing.T) {
		c := minimal()
		for i := 0; i < 7; i++ {
			c.Disks = append(c.Disks, Disk{Path: fmt.Sprintf("/d/%d.img", i), Bus: BusSATA})
		}
		args, err := c.Args()
		require.NoError(t, err)
		var ctrls, buses []string
		for _, d := range devices(t, args) {
			switch d["driver"] {
			case "ich9-ahci":
				ctrls = append(ctrls, d["id"].(string))
			case "ide-hd":
				buses = append(buses, d["bus"].(string))
			}
		}
		assert.Equal(t, []string{"sata0", "sata1"}, ctrls)
		assert.Equal(t, []string{"sata0.0", "sata0.1", "sata0.2", "sata0.3", "sata0.4", "sata0.5", "sata1.0"}, buses)
	})

	t.Run("efi", func(t *testing.T) {
		c := minimal()
		c.Firmware = FirmwareEFI
		args, err := c.Args()
		require.NoError(t, err)
		assert.Equal(t, []string{"q35,pflash0=ovmf-code,pflash1=ovmf-vars"}, values(args, "-machine"))
		bd := values(args, "-blockdev")
		require.Len(t, bd, 4)
		assert.JSONEq(t, `{"driver":"file","filename":"/usr/share/OVMF/OVMF_CODE.fd","node-name":"ovmf-code-file","read-only":true}`, bd[0])
		assert.JSONEq(t, `{"driver":"file","filename":"/run/kubevmm/vm/efivars.fd","node-name":"ovmf-vars-file"}`, bd[2])
	})

	t.Run("incoming", func(t *testing.T) {
		c := minimal()
		c.Incoming = "defer"
		args, err := c.Args()
		require.NoError(t, err)
		assert.Equal(t, []string{"defer"}, values(args, "-incoming"))
		assert.False(t, has(args, "-S"), "the target runs the guest once migrated")
		c.StartPaused = true
		args, err = c.Args()
		require.NoError(t, err)
		assert.True(t, has(args, "-S"))
	})
}

func TestValidate(t *testing.T) {
	long := "/" + strings.Repeat("x", 110)
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "name is empty"},
		{"name with comma", func(c *Config) { c.Name = "a,b" }, `name "a,b"`},
		{"no cpus", func(c *Config) { c.CPUs = 0 }, "cpus 0: must be 1..255"},
		{"too many cpus", func(c *Config) { c.CPUs = 256 }, "cpus 256"},
		{"tiny memory", func(c *Config) { c.MemoryMiB = 8 }, "memory 8 MiB"},
		{"initrd without kernel", func(c *Config) { c.Initrd = "/i" }, "initrd and cmdline need a kernel"},
		{"firmware", func(c *Config) { c.Firmware = "coreboot" }, `firmware "coreboot": must be bios or efi`},
		{"accel", func(c *Config) { c.Accel = "hvf" }, `accel "hvf": must be kvm or tcg`},
		{"cpu model with options", func(c *Config) { c.CPUModel = "host,-vmx" }, "one model name"},
		{"no run dir", func(c *Config) { c.RunDir = "" }, "run dir is empty"},
		{"relative run dir", func(c *Config) { c.RunDir = "run" }, "must be absolute"},
		{"run dir too long", func(c *Config) { c.RunDir = long }, "too long for a unix socket path"},
		{"serial socket too long", func(c *Config) { c.SerialSocket = long }, "serial socket"},
		{"relative vnc socket", func(c *Config) { c.VNCSocket = "vnc.sock" }, `vnc socket "vnc.sock": must be absolute`},
		{"incoming exec", func(c *Config) { c.Incoming = "exec:nc -l 4444" }, "only tcp:HOST:PORT and unix:PATH"},
		{"incoming bad port", func(c *Config) { c.Incoming = "tcp:127.0.0.1:99999" }, "port \"99999\""},
		{"negative command timeout", func(c *Config) { c.CommandTimeout = -time.Second }, "command timeout"},
		{"disk without path", func(c *Config) { c.Disks = []Disk{{}} }, "disk 0: path is empty"},
		{"disk format", func(c *Config) { c.Disks = []Disk{{Path: "/d", Format: "vmdk"}} }, `format "vmdk"`},
		{"disk bus", func(c *Config) { c.Disks = []Disk{{Path: "/d", Bus: "scsi"}} }, `bus "scsi"`},
		{"virtio cdrom", func(c *Config) { c.Disks = []Disk{{Path: "/d", CDROM: true}} }, "CD-ROM must be on the sata bus"},
		{"read-only sata disk", func(c *Config) { c.Disks = []Disk{{Path: "/d", Bus: BusSATA, ReadOnly: true}} }, "SATA hard disk cannot be read-only"},
		{"long serial", func(c *Config) { c.Disks = []Disk{{Path: "/d", Serial: strings.Repeat("s", 21)}} }, "at most 20 characters"},
		{"serial with space", func(c *Config) { c.Disks = []Disk{{Path: "/d", Serial: "a b"}} }, "printable ASCII"},
		{"sata disk queues", func(c *Config) { c.Disks = []Disk{{Path: "/d", Bus: BusSATA, Queues: 2}} }, "more than one only on the virtio bus"},
		{"disk queues", func(c *Config) { c.Disks = []Disk{{Path: "/d", Queues: 257}} }, "257 queues"},
		{"e1000 queues", func(c *Config) { c.NICs = []NIC{{Model: NICE1000, Tap: "t", Queues: 2}} }, "more than one only with the virtio model"},
		{"nic queues", func(c *Config) { c.NICs = []NIC{{Tap: "t", Queues: -1}} }, "-1 queues"},
		{"nic model", func(c *Config) { c.NICs = []NIC{{Model: "rtl8139", Tap: "tap0"}} }, `model "rtl8139"`},
		{"nic without tap", func(c *Config) { c.NICs = []NIC{{}} }, "nic 0: tap"},
		{"nic tap name too long", func(c *Config) { c.NICs = []NIC{{Tap: "a-very-long-tap-name"}} }, "1..15 characters"},
		{"nic bad mac", func(c *Config) { c.NICs = []NIC{{Tap: "t", MAC: "52:54:00:12:34"}} }, "not a 6-byte MAC"},
		{"nic multicast mac", func(c *Config) { c.NICs = []NIC{{Tap: "t", MAC: "01:00:5e:00:00:01"}} }, "multicast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := minimal()
			tc.modify(&c)
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			_, err = c.Args()
			assert.Error(t, err, "no command line for an invalid config")
		})
	}

	t.Run("every problem is reported at once", func(t *testing.T) {
		c := minimal()
		c.CPUs, c.MemoryMiB = 0, 1
		err := c.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cpus 0")
		assert.Contains(t, err.Error(), "memory 1 MiB")
	})
}
