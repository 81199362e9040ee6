package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// TestReset restarts one guest in place every way there is, each seen on
// the console as the kernel's first message again while the same vmm
// keeps running: `vmm reboot` (the power button; the guest's poweroff
// boots it again), which is followed through a whole second boot to a
// shell that finds its virtio device again; then, in restores of a
// snapshot of the first boot (RAM mapped from the snapshot file), the
// guest's own `reboot -f` with --on-reboot reset, and `vmm reset`. A
// restore that has no kernel to boot again refuses a reset and keeps
// running.
func TestReset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	kernel, initrd := guestimage.Kernel(t), guestimage.Initramfs(t)
	bootRE := regexp.MustCompile(`Linux version \d`)
	shellRE := regexp.MustCompile(`kubevmm-guest: shell on the console`)
	virtioRE := regexp.MustCompile(`(?m)^virtio 0x0004\r?$`)
	state := func(sock string) api.State {
		t.Helper()
		r := vmm(t, "status", "--api", sock)
		require.Equal(t, 0, r.code, "status: %s", r.stderr)
		var i api.Info
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &i))
		return i.State
	}

	a := startVMM(t, "run", "--kernel", kernel, "--initrd", initrd, "--memory", "128M", "--rng",
		"--cmdline", machine.DefaultCmdline+" kubevmm.mode=shell", "--console", "socket:"+sock("a.con"), "--api", sock("a.api"))
	ac := attach(t, sock("a.con"), a)
	_, pos := ac.waitFor(shellRE, 0)
	snapDir := sock("snap")
	r := vmm(t, "snapshot", "--api", sock("a.api"), "--dir", snapDir)
	require.Equal(t, 0, r.code, "snapshot: %s%s", r.stdout, r.stderr)

	r = vmm(t, "reboot", "--api", sock("a.api"))
	require.Equal(t, 0, r.code, "reboot: %s", r.stderr)
	_, pos = ac.waitFor(regexp.MustCompile(`kubevmm-guest: shutdown requested`), pos)
	_, pos = ac.waitFor(bootRE, pos)
	assert.Equal(t, api.StateRunning, state(sock("a.api")), "the VM runs through the reset")
	_, pos = ac.waitFor(shellRE, pos)
	ac.send("echo virtio $(cat /sys/bus/virtio/devices/*/device)")
	ac.waitFor(virtioRE, pos)
	require.Equal(t, 0, vmm(t, "stop", "--api", sock("a.api")).code)
	assert.Equal(t, 0, a.wait(time.Minute), "stderr: %s", a.stderr.String())

	// The guest's own reboot, then the API's reset, in a restore.
	b := startVMM(t, "restore", "--snapshot", snapDir, "--kernel", kernel, "--initrd", initrd, "--on-reboot", "reset",
		"--console", "socket:"+sock("b.con"), "--api", sock("b.api"))
	bc := attach(t, sock("b.con"), b)
	bc.send("reboot -f")
	_, pos = bc.waitFor(bootRE, 0)
	r = vmm(t, "reset", "--api", sock("b.api"))
	require.Equal(t, 0, r.code, "reset: %s", r.stderr)
	bc.waitFor(bootRE, pos)
	assert.Equal(t, api.StateRunning, state(sock("b.api")))
	require.Equal(t, 0, vmm(t, "stop", "--api", sock("b.api")).code)
	assert.Equal(t, 0, b.wait(time.Minute), "stderr: %s", b.stderr.String())

	// Without a kernel to boot again a reset is refused, and the guest
	// runs on.
	c := startVMM(t, "restore", "--snapshot", snapDir, "--console", "socket:"+sock("c.con"), "--api", sock("c.api"))
	cc := attach(t, sock("c.con"), c)
	r = vmm(t, "reset", "--api", sock("c.api"))
	assert.Equal(t, exitGuest, r.code)
	assert.Contains(t, r.stderr, "cannot restart in place")
	cc.send("echo still $((40+2))")
	cc.waitFor(regexp.MustCompile(`(?m)^still 42\r?$`), 0)
	assert.NotContains(t, cc.output(), "Linux version", "no new boot")
	require.Equal(t, 0, vmm(t, "stop", "--api", sock("c.api")).code)
	assert.Equal(t, 0, c.wait(time.Minute), "stderr: %s", c.stderr.String())
}
