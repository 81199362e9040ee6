package qemu

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/launcher/qmp"
	"github.com/kubevmm/kubevmm/test/guestimage"
)

// TestLinuxGuest boots the test guest once, running a counter, and takes
// it through the life of a VM: console, pause/resume, a refused and a
// cancelled migration, a live migration to a second QEMU, shutdown of the
// target (the guest ignores the power button), and a crash of the source.
func TestLinuxGuest(t *testing.T) {
	requireQEMU(t)
	kernel := guestimage.BzImage(t)
	initrd := guestimage.InitrdWithRun(t, counterScript, map[string]string{"etc/kubevmm/ignore-button": ""})
	ctx := testCtx(t, 3*bootTime)

	cfg := guestConfig(t, "src", kernel, initrd)
	src := startVM(t, ctx, cfg)
	con := attachConsole(t, ctx, src)

	st, err := src.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, Status{State: "prelaunch", Running: false, PID: src.PID()}, st, "StartPaused: no vCPU ran yet")

	begin := time.Now()
	require.NoError(t, src.Resume(ctx))
	con.waitContains(t, ctx, 0, "kubevmm-guest: cpus=1 ")
	t.Logf("QEMU TCG: boot to /init in %v", time.Since(begin).Round(time.Millisecond))

	t.Run("console and status", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		i, line := con.waitFor(t, ctx, 0, "the guest's report", func(l string) bool {
			return strings.HasPrefix(l, "kubevmm-guest: cpus=")
		})
		assert.Regexp(t, `^kubevmm-guest: cpus=1 online=0 mem_kib=\d+$`, line)
		con.waitCount(t, ctx, i, 1)
		st, err := src.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "running", st.State)
		assert.True(t, st.Running)
		assert.Nil(t, st.Exit)
	})

	t.Run("pause and resume", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		mon, err := src.Monitor(ctx)
		require.NoError(t, err)
		events := mon.Subscribe(qmp.EventStop, qmp.EventResume)
		defer events.Close()

		con.waitCount(t, ctx, 0, 2)
		require.NoError(t, src.Pause(ctx))
		ev, err := events.WaitFor(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, qmp.EventStop, ev.Name)
		st, err := src.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "paused", st.State)
		assert.False(t, st.Running)

		atPause := last(con.counts())
		// Keep the guest paused for 3 s of host time, 3 counts' worth for
		// a running guest. This is the observation window of a negative
		// assertion, not synchronisation. One line may still land in it:
		// printed before the pause, read by us after.
		<-time.After(3 * time.Second)
		whilePaused := last(con.counts())
		assert.LessOrEqual(t, whilePaused, atPause+1, "counter advanced while paused")

		require.NoError(t, src.Resume(ctx))
		ev, err = events.WaitFor(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, qmp.EventResume, ev.Name)
		assert.False(t, ev.Time.IsZero(), "events carry QEMU's timestamp")
		con.waitCount(t, ctx, 0, whilePaused+2)
		requireConsecutive(t, con.counts(), 1)
	})

	t.Run("refused migration", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		for _, tc := range []struct{ uri, want string }{
			{"exec:cat > /tmp/x", "only tcp:HOST:PORT and unix:PATH"},
			{"tcp:127.0.0.1", "missing port"},
			{"unix:relative.sock", "must be absolute"},
		} {
			assert.ErrorContains(t, src.Migrate(ctx, tc.uri, MigrateOptions{}), tc.want)
		}
		_, err := src.MigrateIncoming(ctx, "tcp:127.0.0.1:0")
		assert.ErrorContains(t, err, `needs a VM started with Incoming "defer"`)

		// Nothing listens on port 1: QEMU accepts the command, then the
		// migration fails; the guest keeps running.
		require.NoError(t, src.Migrate(ctx, "tcp:127.0.0.1:1", MigrateOptions{}))
		m, err := src.WaitMigration(ctx)
		require.ErrorIs(t, err, ErrMigrationFailed)
		assert.Equal(t, MigrationFailed, m.Status)
		assert.Contains(t, err.Error(), "Connection refused")
		st, err := src.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "running", st.State)
	})

	t.Run("cancelled migration", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		dst := startVM(t, ctx, incomingConfig(t, "dst-cancel", kernel, initrd))
		addr, err := dst.MigrateIncoming(ctx, "tcp:127.0.0.1:0")
		require.NoError(t, err)
		assert.NotEqual(t, "tcp:127.0.0.1:0", addr, "the real port is reported")

		mon, err := src.Monitor(ctx)
		require.NoError(t, err)
		events := mon.Subscribe(qmp.EventMigration)
		defer events.Close()
		// 64 KiB/s: the guest's memory takes minutes to send, so the
		// migration is certainly still running when it is cancelled.
		require.NoError(t, src.Migrate(ctx, addr, MigrateOptions{BandwidthBytesPerSec: 64 << 10}))
		// Active: connected to the target and sending.
		_, err = events.WaitFor(ctx, func(ev qmp.Event) bool {
			var md qmp.MigrationData
			return ev.DecodeData(&md) == nil && md.Status == "active"
		})
		require.NoError(t, err)
		// QEMU refuses a second migration while one runs.
		err = src.Migrate(ctx, addr, MigrateOptions{})
		var qe *qmp.Error
		require.ErrorAs(t, err, &qe)
		assert.Equal(t, qmp.GenericError, qe.Class)

		m, err := src.MigrationStatus(ctx)
		require.NoError(t, err)
		assert.Equal(t, "active", m.Status)
		assert.Positive(t, m.RemainingBytes)
		require.NoError(t, src.CancelMigration(ctx))
		m, err = src.WaitMigration(ctx)
		require.ErrorIs(t, err, ErrMigrationCancelled)
		assert.Equal(t, MigrationCancelled, m.Status)

		// The source runs on; the target gave up the broken stream.
		before := last(con.counts())
		con.waitCount(t, ctx, 0, before+1)
		_, err = dst.WaitMigration(ctx)
		require.ErrorIs(t, err, ErrExited)
		ex, err := dst.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, ExitFailed, ex.Reason)
		assert.Contains(t, strings.Join(ex.Stderr, "\n"), "load of migration failed")
	})

	// The migration target, with its console attached before anything
	// arrives; it outlives the next subtest, which migrates to it.
	dst := startVM(t, ctx, incomingConfig(t, "dst", kernel, initrd))
	dstCon := attachConsole(t, ctx, dst)

	t.Run("live migration", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		st, err := dst.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "inmigrate", st.State)
		addr, err := dst.MigrateIncoming(ctx, "tcp:127.0.0.1:0")
		require.NoError(t, err)

		mon, err := src.Monitor(ctx)
		require.NoError(t, err)
		events := mon.Subscribe(qmp.EventMigration, qmp.EventMigrationPass)
		defer events.Close()

		con.waitCount(t, ctx, 0, last(con.counts())+1)
		require.NoError(t, src.Migrate(ctx, addr, MigrateOptions{Downtime: 300 * time.Millisecond}))
		m, err := src.WaitMigration(ctx)
		require.NoError(t, err)

		// The source reported its progress as events: states, then passes
		// over guest memory (the first copy, then re-copies of dirtied pages).
		var states []string
		var passes []int
		for len(states) == 0 || states[len(states)-1] != MigrationCompleted {
			ev, err := events.WaitFor(ctx, nil)
			require.NoError(t, err)
			switch ev.Name {
			case qmp.EventMigration:
				var md qmp.MigrationData
				require.NoError(t, ev.DecodeData(&md))
				states = append(states, md.Status)
			case qmp.EventMigrationPass:
				var pd qmp.MigrationPassData
				require.NoError(t, ev.DecodeData(&pd))
				passes = append(passes, pd.Pass)
			}
		}
		assert.Equal(t, []string{"setup", "active", MigrationCompleted}, states)
		require.NotEmpty(t, passes)
		for i, p := range passes {
			assert.Equal(t, i+1, p, "passes %v", passes)
		}
		assert.Equal(t, MigrationCompleted, m.Status)
		assert.Positive(t, m.TransferredBytes)
		assert.GreaterOrEqual(t, m.TotalBytes, int64(128<<20), "guest RAM and firmware regions")
		assert.Zero(t, m.RemainingBytes)
		// Final statistics (QEMU 7.2 reports 0 for both until it has
		// computed them, after announcing completion).
		assert.Positive(t, m.TotalTime)
		assert.LessOrEqual(t, m.Downtime, m.TotalTime)
		t.Logf("migration: total %v, downtime %v, setup %v, %d bytes transferred of %d, %d passes",
			m.TotalTime, m.Downtime, m.SetupTime, m.TransferredBytes, m.TotalBytes, m.Passes)

		dm, err := dst.WaitMigration(ctx)
		require.NoError(t, err)
		assert.Equal(t, MigrationCompleted, dm.Status)

		// The target runs the same guest: its counter goes on from where
		// the source stopped.
		beforeMigration := last(con.counts())
		_, first := dstCon.waitCount(t, ctx, 0, 0)
		assert.Greater(t, first, beforeMigration, "target's first count continues the source's (not restarting at 1)")
		dstCon.waitCount(t, ctx, 0, first+2)
		requireConsecutive(t, dstCon.counts(), first)
		st, err = dst.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "running", st.State)

		// The source stays paused and refuses to run the guest twice.
		st, err = src.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "postmigrate", st.State)
		require.ErrorIs(t, src.Resume(ctx), ErrMigratedAway)
		assert.Less(t, last(con.counts()), first, "the source printed nothing the target did")
	})

	t.Run("shutdown falls back to quit when the guest ignores the power button", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		mon, err := dst.Monitor(ctx)
		require.NoError(t, err)
		powerdown := mon.Subscribe(qmp.EventPowerdown)
		defer powerdown.Close()

		// This guest's /init ignores the button (/etc/kubevmm/ignore-button).
		ex, err := dst.Shutdown(ctx, 3*time.Second)
		require.NoError(t, err)
		assert.Equal(t, ExitHostShutdown, ex.Reason)
		assert.Equal(t, "host-qmp-quit", ex.ShutdownReason)
		assert.Equal(t, 0, ex.ExitCode)
		_, err = powerdown.WaitFor(ctx, nil)
		require.NoError(t, err, "system_powerdown reached QEMU")

		st, err := dst.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, StateExited, st.State)
		require.NotNil(t, st.Exit)
		assert.Equal(t, ExitHostShutdown, st.Exit.Reason)
		require.ErrorIs(t, dst.Pause(ctx), ErrExited)
	})

	t.Run("crash fails the pending command", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		// Stop the process so the command stays pending, then kill it as
		// the OOM killer would.
		stopProcess(t, src.PID())
		pending := make(chan error, 1)
		go func() { pending <- src.Pause(ctx) }()
		require.NoError(t, syscall.Kill(src.PID(), syscall.SIGKILL))
		err := <-pending
		require.ErrorIs(t, err, ErrExited)
		assert.Contains(t, err.Error(), "killed by signal")

		ex, err := src.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, ExitCrashed, ex.Reason)
		assert.Equal(t, syscall.SIGKILL, ex.Signal)
		assert.Equal(t, -1, ex.ExitCode)
		st, err := src.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, StateExited, st.State)
	})
}

// incomingConfig is a migration target for guestConfig's VM: same machine,
// waiting for the stream instead of booting.
func incomingConfig(t *testing.T, name, kernel, initrd string) Config {
	cfg := guestConfig(t, name, kernel, initrd)
	cfg.StartPaused = false
	cfg.Incoming = "defer"
	return cfg
}

func last(counts []int) int {
	if len(counts) == 0 {
		return 0
	}
	return counts[len(counts)-1]
}

// requireConsecutive checks that the counter went first, first+1, ...
// without a gap or a restart.
func requireConsecutive(t *testing.T, counts []int, first int) {
	t.Helper()
	require.NotEmpty(t, counts)
	for i, c := range counts {
		require.Equal(t, first+i, c, "counts %v", counts)
	}
}

// TestGuestPowerOff boots the plain test guest with 2 vCPUs, which prints
// what it sees (both CPUs, from QEMU's ACPI tables, online) and ends with
// `reboot -f`: QEMU reports a guest shutdown and exits.
func TestGuestPowerOff(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	cfg := guestConfig(t, "poweroff", guestimage.BzImage(t), guestimage.Initramfs(t))
	cfg.CPUs = 2
	vm := startVM(t, ctx, cfg)
	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))

	ex, err := vm.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, ExitGuestShutdown, ex.Reason)
	assert.Equal(t, "guest-reset", ex.ShutdownReason)
	assert.Equal(t, 0, ex.ExitCode)
	i := con.waitContains(t, ctx, 0, "kubevmm-guest: cpus=2 online=0-1 ")
	con.waitContains(t, ctx, i, "kubevmm-guest: powering off")

	st, err := vm.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, StateExited, st.State)
	ex2, err := vm.Shutdown(ctx, time.Second)
	require.NoError(t, err, "shutting down an ended VM is not an error")
	assert.Equal(t, ex, ex2)
}

// TestPowerDown: the ACPI power button (system_powerdown) makes the test
// guest's /init power off, and QEMU reports the guest's shutdown.
func TestPowerDown(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	cfg := guestConfig(t, "powerdown", guestimage.BzImage(t), guestimage.InitrdWithRun(t, "exec sleep 100000\n", nil))
	vm := startVM(t, ctx, cfg)
	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))
	i := con.waitContains(t, ctx, 0, "kubevmm-guest: cpus=1 ")

	require.NoError(t, vm.PowerDown(ctx))
	con.waitContains(t, ctx, i, "kubevmm-guest: shutdown requested")
	ex, err := vm.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, ExitGuestShutdown, ex.Reason)
	assert.Equal(t, "guest-shutdown", ex.ShutdownReason)
	assert.Equal(t, 0, ex.ExitCode)
}

// TestHungMonitor: a QEMU that stops answering (here: SIGSTOPped) gives
// each operation a clear error within its deadline, even when the caller
// set none, and Shutdown still ends it.
func TestHungMonitor(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	vm := startVM(t, ctx, Config{
		Name: "hung", CPUs: 1, MemoryMiB: 64, Accel: AccelTCG, StartPaused: true,
		RunDir: filepath.Join(dir, "run"), CommandTimeout: 2 * time.Second,
	})
	stopProcess(t, vm.PID())

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	err := vm.Pause(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "stop")
	assert.Contains(t, err.Error(), vm.QMPPath())

	// No deadline from the caller: the VM's command timeout bounds it.
	_, err = vm.Status(context.Background())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "query-status")

	// Power button and quit go unanswered; SIGKILL ends it.
	ex, err := vm.Shutdown(ctx, time.Second)
	require.NoError(t, err)
	assert.Equal(t, ExitKilled, ex.Reason)
	assert.Equal(t, syscall.SIGKILL, ex.Signal)
}

// TestStartFailures: what cannot start says why, and leaves no process.
func TestStartFailures(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	require.NoError(t, writeSparse(raw, 1<<20))
	base := func(name string) Config {
		return Config{Name: name, CPUs: 1, MemoryMiB: 64, Accel: AccelTCG, StartPaused: true,
			RunDir: filepath.Join(t.TempDir(), "run")}
	}

	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   []string
	}{
		{"efi without OVMF", func(c *Config) {
			c.Firmware = FirmwareEFI
			c.OVMFCode = filepath.Join(dir, "no-ovmf", "OVMF_CODE.fd")
			c.OVMFVars = filepath.Join(dir, "no-ovmf", "OVMF_VARS.fd")
		}, []string{"firmware efi needs OVMF (Debian package ovmf)", "no-ovmf/OVMF_CODE.fd"}},
		{"missing kernel", func(c *Config) { c.Kernel = filepath.Join(dir, "bzImage") }, []string{"kernel:", "no such file"}},
		{"no such binary", func(c *Config) { c.Binary = "qemu-system-nonexistent" }, []string{"hack/deps.sh qemu", "qemu-system-nonexistent"}},
		{"invalid config", func(c *Config) { c.CPUs = 0 }, []string{"cpus 0"}},
		{"QEMU refuses the disk", func(c *Config) {
			c.Disks = []Disk{{Path: raw, Format: FormatQCOW2}}
		}, []string{"exited during start", "failed: exit status 1", "qcow2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base("vm")
			tc.modify(&cfg)
			vm, err := Start(ctx, cfg)
			require.Error(t, err)
			assert.Nil(t, vm)
			t.Log(err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	t.Run("monitor socket in use", func(t *testing.T) {
		cfg := base("first")
		startVM(t, ctx, cfg)
		_, err := Start(ctx, cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "served by a running process")
	})
}

// TestDevices starts (paused, no guest) a VM with every kind of device the
// backend offers and checks, through QEMU itself, that each is there as
// configured: SATA hard disk and CD-ROM on an AHCI controller, a read-only
// virtio disk, e1000 and virtio NICs on taps, Hyper-V CPU flags, VNC.
func TestDevices(t *testing.T) {
	requireQEMU(t)
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	qcow := filepath.Join(dir, "system.qcow2")
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", qcow, "64M").CombinedOutput()
	require.NoError(t, err, "qemu-img: %s", out)
	iso := filepath.Join(dir, "install.iso")
	require.NoError(t, writeSparse(iso, 1<<20))
	drivers := filepath.Join(dir, "drivers.img")
	require.NoError(t, writeSparse(drivers, 1<<20))

	cfg := Config{
		Name: "devices", CPUs: 1, MemoryMiB: 64, Accel: AccelTCG, StartPaused: true, HyperV: true,
		RunDir:    filepath.Join(dir, "run"),
		VNCSocket: filepath.Join(dir, "vnc.sock"),
		Disks: []Disk{
			{Path: qcow, Format: FormatQCOW2, Bus: BusSATA, Serial: "WIN-C", BootOrder: 2},
			{Path: iso, Bus: BusSATA, CDROM: true, BootOrder: 1},
			{Path: drivers, Bus: BusVirtio, ReadOnly: true, Serial: "drivers", Queues: 2},
		},
	}
	// QEMU creates the taps itself when it may (root, /dev/net/tun).
	_, tunErr := os.Stat("/dev/net/tun")
	withNICs := os.Geteuid() == 0 && tunErr == nil
	if withNICs {
		cfg.NICs = []NIC{
			{Model: NICE1000, Tap: fmt.Sprintf("kvt%da", os.Getpid()), MAC: "52:54:00:12:34:56"},
			{Model: NICVirtio, Tap: fmt.Sprintf("kvt%db", os.Getpid()), MAC: "52:54:00:12:34:57", Queues: 2},
		}
	} else {
		t.Log("not root or no /dev/net/tun: NICs not tested")
	}
	vm := startVM(t, ctx, cfg)
	mon, err := vm.Monitor(ctx)
	require.NoError(t, err)

	t.Run("pci", func(t *testing.T) {
		var buses []struct {
			Devices []struct {
				QdevID string `json:"qdev_id"`
				ID     struct {
					Vendor int `json:"vendor"`
					Device int `json:"device"`
				} `json:"id"`
			} `json:"devices"`
		}
		require.NoError(t, mon.Execute(ctx, "query-pci", nil, &buses))
		got := map[string]string{}
		for _, b := range buses {
			for _, d := range b.Devices {
				if d.QdevID != "" {
					got[d.QdevID] = fmt.Sprintf("%04x:%04x", d.ID.Vendor, d.ID.Device)
				}
			}
		}
		want := map[string]string{
			"sata0":     "8086:2922", // ICH9 AHCI
			"disk2-dev": "1af4:1001", // virtio-blk
			"video0":    "1234:1111", // standard VGA
		}
		if withNICs {
			want["net0-dev"] = "8086:100e" // e1000
			want["net1-dev"] = "1af4:1000" // virtio-net
		}
		assert.Equal(t, want, got)
	})

	t.Run("disks", func(t *testing.T) {
		var blocks []struct {
			Removable bool `json:"removable"`
			Inserted  struct {
				NodeName string `json:"node-name"`
				RO       bool   `json:"ro"`
				Drv      string `json:"drv"`
				File     string `json:"file"`
			} `json:"inserted"`
		}
		require.NoError(t, mon.Execute(ctx, "query-block", nil, &blocks))
		type disk struct {
			Node, Drv, File string
			RO, Removable   bool
		}
		var got []disk
		for _, b := range blocks {
			got = append(got, disk{b.Inserted.NodeName, b.Inserted.Drv, b.Inserted.File, b.Inserted.RO, b.Removable})
		}
		assert.ElementsMatch(t, []disk{
			{"disk0", "qcow2", qcow, false, false},
			{"disk1", "raw", iso, true, true},
			{"disk2", "raw", drivers, true, false},
		}, got)
		for dev, serial := range map[string]string{"disk0-dev": "WIN-C", "disk2-dev": "drivers"} {
			var s string
			require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": "/machine/peripheral/" + dev, "property": "serial"}, &s))
			assert.Equal(t, serial, s)
		}
		var driver string
		require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": "/machine/peripheral/disk1-dev", "property": "type"}, &driver))
		assert.Equal(t, "ide-cd", driver)
		var queues int
		require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": "/machine/peripheral/disk2-dev", "property": "num-queues"}, &queues))
		assert.Equal(t, 2, queues, "the virtio disk's request queues")
	})

	t.Run("nics", func(t *testing.T) {
		if !withNICs {
			t.Skip("not root or no /dev/net/tun")
		}
		for i, n := range cfg.NICs {
			var mac string
			require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": fmt.Sprintf("/machine/peripheral/net%d-dev", i), "property": "mac"}, &mac))
			assert.Equal(t, n.MAC, mac)
			_, err := net.InterfaceByName(n.Tap)
			assert.NoError(t, err, "tap %s exists on the host", n.Tap)
		}
		var mq bool
		require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": "/machine/peripheral/net1-dev", "property": "mq"}, &mq))
		assert.True(t, mq, "the virtio NIC with two queues offers multi-queue")
		flags, err := os.ReadFile("/sys/class/net/" + cfg.NICs[1].Tap + "/tun_flags")
		require.NoError(t, err)
		f, err := strconv.ParseUint(strings.TrimSpace(string(flags)), 0, 32)
		require.NoError(t, err)
		assert.NotZero(t, f&unix.IFF_MULTI_QUEUE, "QEMU opened a multi-queue tap (tun_flags %s)", flags)
	})

	t.Run("hyperv", func(t *testing.T) {
		var cpus []struct {
			QOMPath string `json:"qom-path"`
		}
		require.NoError(t, mon.Execute(ctx, "query-cpus-fast", nil, &cpus))
		require.Len(t, cpus, 1)
		for _, prop := range []string{"hv-relaxed", "hv-vapic", "hv-time"} {
			var on bool
			require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": cpus[0].QOMPath, "property": prop}, &on))
			assert.True(t, on, prop)
		}
		var spins int
		require.NoError(t, mon.Execute(ctx, "qom-get", map[string]string{"path": cpus[0].QOMPath, "property": "hv-spinlocks"}, &spins))
		assert.Equal(t, 0x1fff, spins)
	})

	t.Run("vnc", func(t *testing.T) {
		conn, err := net.Dial("unix", cfg.VNCSocket)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(generous)))
		hello := make([]byte, 12)
		_, err = io.ReadFull(conn, hello)
		require.NoError(t, err)
		assert.Equal(t, "RFB 003.008\n", string(hello), "a VNC server's protocol version")
	})

	t.Run("reconnect after the monitor connection ends", func(t *testing.T) {
		require.NoError(t, mon.Close())
		st, err := vm.Status(ctx)
		require.NoError(t, err)
		assert.Equal(t, "prelaunch", st.State)
		again, err := vm.Monitor(ctx)
		require.NoError(t, err)
		assert.NotSame(t, mon, again)
		require.ErrorIs(t, mon.Execute(ctx, "query-status", nil, nil), qmp.ErrClosed)
	})

	ex, err := vm.Kill(ctx)
	require.NoError(t, err)
	assert.Equal(t, ExitKilled, ex.Reason)
}

// TestEFI shows an EFI VM running OVMF (to its UEFI shell, there being
// nothing to boot) with its own variable store. Needs Debian's ovmf package.
func TestEFI(t *testing.T) {
	requireQEMU(t)
	if _, err := os.Stat(DefaultOVMFCode); err != nil {
		t.Skipf("OVMF not installed (apt-get install ovmf): %v", err)
	}
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	cfg := Config{Name: "efi", CPUs: 1, MemoryMiB: 128, Accel: AccelTCG, Firmware: FirmwareEFI,
		StartPaused: true, RunDir: filepath.Join(dir, "run"), SerialSocket: filepath.Join(dir, "serial.sock")}
	vm := startVM(t, ctx, cfg)
	vars, err := os.Stat(cfg.efiVarsPath())
	require.NoError(t, err)
	tmpl, err := os.Stat(DefaultOVMFVars)
	require.NoError(t, err)
	assert.Equal(t, tmpl.Size(), vars.Size())

	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))
	con.waitContains(t, ctx, 0, "UEFI Interactive Shell")
}

// helperEnv makes the test binary act as a launcher for
// TestQEMUDiesWithLauncher.
const helperEnv = "KUBEVMM_QEMU_TEST_LAUNCHER_DIR"

// TestQEMUDiesWithLauncher: when the process that started QEMU dies
// without cleaning up (crash, OOM kill, test timeout), QEMU is killed too
// instead of running on unmanaged.
func TestQEMUDiesWithLauncher(t *testing.T) {
	if dir := os.Getenv(helperEnv); dir != "" {
		// The launcher: start a VM, say its pid, die when stdin closes.
		vm, err := Start(context.Background(), Config{Name: "orphan", CPUs: 1, MemoryMiB: 64,
			Accel: AccelTCG, StartPaused: true, RunDir: filepath.Join(dir, "run")})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println(vm.PID())
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0) // no Kill, no cleanup
	}
	requireQEMU(t)
	ctx := testCtx(t, generous)
	launcher := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestQEMUDiesWithLauncher$")
	launcher.Env = append(os.Environ(), helperEnv+"="+t.TempDir())
	stdin, err := launcher.StdinPipe()
	require.NoError(t, err)
	stdout, err := launcher.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, launcher.Start())

	var pid int
	_, err = fmt.Fscan(stdout, &pid)
	require.NoError(t, err, "the launcher reports QEMU's pid")
	// QEMU's parent is alive, so the pid is QEMU's: watch it by pidfd.
	pidfd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	require.Contains(t, string(cmdline), "qemu-system-x86_64")

	require.NoError(t, stdin.Close())
	require.NoError(t, launcher.Wait())

	// A pidfd becomes readable when its process exits.
	deadline, _ := ctx.Deadline()
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, int(time.Until(deadline).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "QEMU still running after its launcher died")
		break
	}
}
