package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
)

// TestMigrateCancel starts migrations to a target that accepts the
// connection and then never answers, and cancels them: with `vmm migrate
// --cancel` and by interrupting `vmm migrate`. Each time the migrating
// command reports the failure, and the VM runs on here.
func TestMigrateCancel(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "loop.elf")
	require.NoError(t, os.WriteFile(kernel, boottest.TinyELF([]byte{0xeb, 0xfe}, 0x100000), 0o644)) // jmp $
	api := filepath.Join(dir, "vm.api")
	vm := startVMM(t, "run", "--kernel", kernel, "--memory", "64M", "--console", "none", "--api", api)
	waitForFile(t, api, vm)

	stuck, err := net.Listen("unix", filepath.Join(dir, "stuck.mig"))
	require.NoError(t, err)
	defer stuck.Close()
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never read from
		}
	}()

	for _, tc := range []struct {
		name   string
		cancel func(t *testing.T, mig *exec.Cmd)
	}{
		{"vmm migrate --cancel", func(t *testing.T, _ *exec.Cmd) {
			r := vmm(t, "migrate", "--api", api, "--cancel")
			require.Equal(t, exitOK, r.code, "%s%s", r.stdout, r.stderr)
			assert.Contains(t, r.stdout, "cancelled; the VM keeps running here")
		}},
		{"Ctrl-C on vmm migrate", func(t *testing.T, mig *exec.Cmd) {
			require.NoError(t, mig.Process.Signal(os.Interrupt))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mig := vmmCommand("migrate", "--api", api, "--to", "unix:"+stuck.Addr().String())
			var out bytes.Buffer
			mig.Stdout, mig.Stderr = &out, &out
			require.NoError(t, mig.Start())
			waitMigrating(t, api)
			tc.cancel(t, mig)
			done := make(chan error, 1)
			go func() { done <- mig.Wait() }()
			select {
			case err := <-done:
				require.Error(t, err, "the migrating command fails: %s", out.String())
			case <-time.After(time.Minute):
				mig.Process.Kill()
				t.Fatalf("vmm migrate still waits after the cancel: %s", out.String())
			}
			assert.Contains(t, out.String(), "cancelled")
			assert.Contains(t, out.String(), "the VM keeps running here")
			r := vmm(t, "status", "--api", api)
			assert.Contains(t, r.stdout, `"state": "Running"`)
		})
	}
	// Nothing to cancel: an error of the VM's state (status 1), one line.
	r := vmm(t, "migrate", "--api", api, "--cancel")
	assert.Equal(t, exitGuest, r.code)
	assert.Equal(t, "vmm: migrate: cancel: not possible in the VM's current state: no migration in progress\n", r.stderr)
}
