package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
)

// seccompMode is the Seccomp line of a process's status: 2 is a filter.
func seccompMode(t *testing.T, p *vmmProc) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "status"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^Seccomp:\s*(\d+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no Seccomp line in %s", b)
	return string(m[1])
}

// TestSeccompCoversTheVMMsPaths runs real VMMs with the default filter
// (kill) through what a running VM does: devices, pause and resume,
// snapshot, migration to another VMM, restore, stop. A system call
// missing from the list kills a VMM with SIGSYS and fails here.
func TestSeccompCoversTheVMMsPaths(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	t.Parallel()
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	kernel := path("spin.elf")
	require.NoError(t, os.WriteFile(kernel, boottest.TinyELF([]byte{0xeb, 0xfe}, 0x100000), 0o644))
	disk := path("disk.img")
	require.NoError(t, os.WriteFile(disk, make([]byte, 1<<20), 0o644))
	ok := func(args ...string) {
		t.Helper()
		r := vmm(t, args...)
		require.Equal(t, 0, r.code, "vmm %v: %s%s", args, r.stdout, r.stderr)
	}

	a := startVMM(t, "run", "--kernel", kernel, "--memory", "64M", "--console", "socket:"+path("a.con"),
		"--api", path("a.api"), "--disk", disk+",ro", "--rng", "--vsock", "cid=3,socket="+path("a.vsock"), "--seccomp=kill")
	waitForFile(t, path("a.api"), a)
	assert.Equal(t, "2", seccompMode(t, a), "a running vmm is under a seccomp filter")

	// The host side of the devices: a console client, a vsock connect to
	// a port nobody in the guest listens on (refused, the VMM goes on).
	con, err := net.Dial("unix", path("a.con"))
	require.NoError(t, err)
	defer con.Close()
	vs, err := net.Dial("unix", path("a.vsock"))
	require.NoError(t, err)
	_, err = vs.Write([]byte("CONNECT 5000\n"))
	require.NoError(t, err)
	_, err = vs.Read(make([]byte, 64)) // the guest never answers: reset
	assert.Error(t, err)
	vs.Close()

	ok("pause", "--api", path("a.api"))
	ok("resume", "--api", path("a.api"))
	ok("status", "--api", path("a.api"))
	ok("snapshot", "--api", path("a.api"), "--dir", path("snap"))

	b := startVMM(t, "run", "--incoming", "unix:"+path("b.in"), "--api", path("b.api"), "--console", "none",
		"--vsock-socket", path("b.vsock"))
	waitForFile(t, path("b.in"), b)
	ok("migrate", "--api", path("a.api"), "--to", "unix:"+path("b.in"))
	assert.Equal(t, 0, a.wait(2*time.Minute), "the migrated source exits cleanly: %s", a.stderr.String())
	waitForFile(t, path("b.api"), b)
	assert.Equal(t, "2", seccompMode(t, b), "a migration target runs under the filter")
	ok("pause", "--api", path("b.api"))
	ok("snapshot", "--api", path("b.api"), "--dir", path("snap2"))
	ok("stop", "--api", path("b.api"))
	assert.Equal(t, 0, b.wait(2*time.Minute), "%s", b.stderr.String())

	c := startVMM(t, "restore", "--snapshot", path("snap"), "--api", path("c.api"), "--console", "none",
		"--vsock-socket", path("c.vsock"))
	waitForFile(t, path("c.api"), c)
	assert.Equal(t, "2", seccompMode(t, c), "a restored VM runs under the filter")
	ok("status", "--api", path("c.api"))
	ok("stop", "--api", path("c.api"))
	assert.Equal(t, 0, c.wait(2*time.Minute), "%s", c.stderr.String())
}

func TestSeccompFlag(t *testing.T) {
	assertOneLineError(t, vmm(t, "run", "--kernel", "/nonexistent", "--seccomp", "strict"), "--seccomp")
}
