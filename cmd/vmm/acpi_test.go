package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// TestACPIGuestEnds boots one guest with ACPI (two vCPUs and a virtio
// device, all from the tables) and ends it, and two restores of its
// snapshot, each way a guest ends through ACPI: `vmm stop --graceful`
// presses the power button and the guest powers off; a guest's own
// `poweroff -f` ends the VM; a guest that ignores the button is stopped
// when the timeout is up. Every time vmm exits 0.
func TestACPIGuestEnds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	shellRE := regexp.MustCompile(`kubevmm-guest: shell on the console`)

	a := startVMM(t, "run", "--kernel", guestimage.Kernel(t), "--initrd", guestimage.Initramfs(t),
		"--cpus", "2", "--memory", "128M", "--rng", "--cmdline", machine.DefaultCmdline+" kubevmm.mode=shell",
		"--console", "socket:"+sock("a.con"), "--api", sock("a.api"), "--report", sock("a.json"), "--mark", "kubevmm-guest: cpus=")
	ac := attach(t, sock("a.con"), a)
	_, pos := ac.waitFor(regexp.MustCompile(`kubevmm-guest: cpus=2 online=0-1 `), 0)
	_, pos = ac.waitFor(shellRE, pos)
	ac.send("echo virtio $(cat /sys/bus/virtio/devices/*/device)")
	_, pos = ac.waitFor(regexp.MustCompile(`(?m)^virtio 0x0004\r?$`), pos)
	boot := ac.output()
	assert.Contains(t, boot, "ACPI: Using ACPI (MADT) for SMP configuration information", "Linux found its CPUs in the MADT")
	assert.NotContains(t, boot, "virtio_mmio.device=", "the DSDT lists the devices, not the command line")
	assert.NotRegexp(t, `probe of \S+ failed`, boot, "every device is found once")

	snapDir := filepath.Join(dir, "snap")
	r := vmm(t, "snapshot", "--api", sock("a.api"), "--dir", snapDir)
	require.Equal(t, 0, r.code, "snapshot: %s%s", r.stdout, r.stderr)

	// a deadline for a hung guest, not a speed limit: the guest's kernel
	// work is emulated on nested hosts
	r = vmm(t, "stop", "--graceful", "--timeout", "10m", "--api", sock("a.api"))
	require.Equal(t, 0, r.code, "stop --graceful: %s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "the guest powered off")
	ac.waitFor(regexp.MustCompile(`kubevmm-guest: shutdown requested`), pos)
	assert.Equal(t, 0, a.wait(time.Minute), "stderr: %s", a.stderr.String())
	rep := readReport(t, sock("a.json"))
	assert.Equal(t, string(machine.ExitShutdown), rep.Exit, "ACPI S5 ended the VM")
	t.Logf("MEASURED boot to /init with ACPI: %.1f s", rep.Marks["kubevmm-guest: cpus="]/1000)

	// The guest's own poweroff.
	b := startVMM(t, "restore", "--snapshot", snapDir, "--console", "socket:"+sock("b.con"), "--report", sock("b.json"))
	bc := attach(t, sock("b.con"), b)
	bc.send("poweroff -f")
	assert.Equal(t, 0, b.wait(10*time.Minute), "stderr: %s", b.stderr.String())
	assert.Equal(t, string(machine.ExitShutdown), readReport(t, sock("b.json")).Exit, "console:\n%s", bc.output())

	// A guest that ignores the button: stopped after the timeout.
	c := startVMM(t, "restore", "--snapshot", snapDir, "--console", "socket:"+sock("c.con"),
		"--api", sock("c.api"), "--report", sock("c.json"))
	cc := attach(t, sock("c.con"), c)
	cc.send("touch /etc/kubevmm/ignore-button; echo ignore=on")
	cc.waitFor(regexp.MustCompile(`(?m)^ignore=on\r?$`), 0)
	r = vmm(t, "stop", "--graceful", "--timeout", "5s", "--api", sock("c.api"))
	require.Equal(t, 0, r.code, "stop --graceful: %s%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "the guest did not power off within 5s: stopping it")
	assert.Equal(t, 0, c.wait(time.Minute), "stderr: %s", c.stderr.String())
	assert.Equal(t, string(machine.ExitStopped), readReport(t, sock("c.json")).Exit)
	assert.NotContains(t, cc.output(), "shutdown requested")
}

// readReport reads a vmm --report file.
func readReport(t *testing.T, path string) report {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep
}

// output is everything the console showed so far.
func (c *consoleClient) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}
