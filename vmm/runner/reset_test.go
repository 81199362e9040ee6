package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/runner"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
)

// Tiny guests at runnertest.CodeAddr, in 64-bit mode.
var (
	// printA writes 'A' to COM1 once, then spins.
	printA = []byte{0xb0, 'A', 0x66, 0xba, 0xf8, 0x03, 0xee, 0xeb, 0xfe}
	// printAReboot writes 'A', then pulls the i8042 reset line (reboot=k).
	printAReboot = []byte{0xb0, 'A', 0x66, 0xba, 0xf8, 0x03, 0xee, 0xb0, 0xfe, 0xe6, 0x64, 0xeb, 0xfe}
)

type resetVM struct {
	r       *runner.Runner
	con     *runnertest.Log
	exited  chan machine.Exit
	reloads *atomic.Int32
}

// startReset runs code in a VM; with reload, Config.Reload hands the same
// kernel back (and counts the calls).
func startReset(t *testing.T, code []byte, reload, rebootResets bool) *resetVM {
	t.Helper()
	kernel := boottest.TinyELF(code, runnertest.CodeAddr)
	v := &resetVM{con: &runnertest.Log{}, exited: make(chan machine.Exit, 1), reloads: &atomic.Int32{}}
	cfg := machine.Config{CPUs: 1, MemoryBytes: memBytes, Kernel: kernel, Console: v.con, RebootResets: rebootResets}
	if reload {
		cfg.Reload = func() ([]byte, []byte, error) { v.reloads.Add(1); return kernel, nil, nil }
	}
	m, err := machine.New(cfg)
	if err != nil && strings.Contains(err.Error(), "/dev/kvm") {
		t.Skip(err)
	}
	require.NoError(t, err)
	v.r = runner.New(m, 1, memBytes)
	go func() { v.exited <- v.r.Run() }()
	t.Cleanup(func() {
		_ = v.r.Stop()
		<-v.r.Done()
		_ = m.Close()
	})
	return v
}

// waitConsole waits until the console shows want (the bound only turns a
// hang into a failure).
func (v *resetVM) waitConsole(t *testing.T, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.HasPrefix(v.con.String(), want) }, time.Minute, time.Millisecond,
		"console %q, want %q", v.con.String(), want)
}

// A reset through the API boots the guest again in the same VM: its code
// runs once more from the reloaded kernel, on cleared RAM, and the VM
// stays Running.
func TestResetBootsAgain(t *testing.T) {
	v := startReset(t, printA, true, false)
	v.waitConsole(t, "A")
	mem := v.r.Machine().Memory()
	// What the guest would find if RAM were kept: a changed program and
	// a stray byte.
	require.NoError(t, mem.WriteAt([]byte{'B'}, runnertest.CodeAddr+1))
	require.NoError(t, mem.WriteAt([]byte{0x5a}, 0x300000))

	require.NoError(t, v.r.Reset())
	v.waitConsole(t, "AA")
	assert.Equal(t, int32(1), v.reloads.Load(), "the kernel was read again")
	b := make([]byte, 1)
	require.NoError(t, mem.ReadAt(b, 0x300000))
	assert.Equal(t, byte(0), b[0], "RAM was cleared")
	assert.Equal(t, api.StateRunning, v.r.Info().State)

	// Paused, then reset: it boots again, running.
	require.NoError(t, v.r.Pause())
	require.NoError(t, v.r.Reset())
	v.waitConsole(t, "AAA")
	assert.Equal(t, api.StateRunning, v.r.Info().State)

	require.NoError(t, v.r.Stop())
	assert.Equal(t, machine.ExitStopped, (<-v.exited).Reason)
	assert.Equal(t, "AAA", v.con.String())
}

// The guest's own reboot boots it again with RebootResets, and ends the
// VM without (as in Firecracker).
func TestGuestRebootPolicy(t *testing.T) {
	v := startReset(t, printAReboot, true, true)
	v.waitConsole(t, "AAA")
	assert.Equal(t, api.StateRunning, v.r.Info().State, "rebooting in a loop, and running")
	require.NoError(t, v.r.Stop())
	assert.Equal(t, machine.ExitStopped, (<-v.exited).Reason)

	v = startReset(t, printAReboot, true, false)
	assert.Equal(t, machine.ExitReset, (<-v.exited).Reason)
	assert.Equal(t, "A", v.con.String())
	assert.Equal(t, int32(0), v.reloads.Load())
}

// A VM that cannot reload its kernel refuses reset and soft reboot (409)
// and runs on; an ended VM refuses them too.
func TestResetRefused(t *testing.T) {
	v := startReset(t, printA, false, false)
	v.waitConsole(t, "A")
	for name, err := range map[string]error{"reset": v.r.Reset(), "softreboot": v.r.SoftReboot()} {
		assert.True(t, errors.Is(err, api.ErrConflict), "%s: %v", name, err)
		assert.ErrorContains(t, err, "cannot restart in place", name)
	}
	assert.Equal(t, api.StateRunning, v.r.Info().State)
	require.NoError(t, v.r.Stop())
	<-v.exited
	assert.ErrorIs(t, v.r.Reset(), api.ErrConflict)

	// Over the control API, as virt-handler asks.
	vm := runnertest.Spinning(t)
	err := vm.Client.Reset(context.Background())
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 409, e.Status)
}
