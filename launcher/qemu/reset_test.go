package qemu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
)

// TestReset: system_reset boots the guest again in the same QEMU, which
// keeps running; a QEMU with -no-reboot refuses it (its firmware's own
// reset would end it) and runs on. Without -no-reboot (NoReboot false, a
// VMI with rebootPolicy Reboot) the guest's own reboot boots it again too.
func TestReset(t *testing.T) {
	requireQEMU(t)
	const booted = "kubevmm-guest: cpus=1 "

	t.Run("system_reset", func(t *testing.T) {
		ctx := testCtx(t, 2*bootTime)
		cfg := guestConfig(t, "reset", guestimage.BzImage(t), guestimage.InitrdWithRun(t, "exec sleep 100000\n", nil))
		cfg.NoReboot = false
		vm := startVM(t, ctx, cfg)
		con := attachConsole(t, ctx, vm)
		require.NoError(t, vm.Resume(ctx))
		i := con.waitContains(t, ctx, 0, booted)

		require.NoError(t, vm.Reset(ctx))
		con.waitContains(t, ctx, i+1, booted)
		st, err := vm.Status(ctx)
		require.NoError(t, err)
		assert.True(t, st.Running, "state %s", st.State)
		assert.Nil(t, st.Exit)
	})

	t.Run("refused with -no-reboot", func(t *testing.T) {
		ctx := testCtx(t, bootTime)
		cfg := guestConfig(t, "noreboot", guestimage.BzImage(t), guestimage.InitrdWithRun(t, "exec sleep 100000\n", nil))
		vm := startVM(t, ctx, cfg)
		con := attachConsole(t, ctx, vm)
		require.NoError(t, vm.Resume(ctx))
		con.waitContains(t, ctx, 0, booted)
		require.ErrorIs(t, vm.Reset(ctx), ErrNoReboot)
		st, err := vm.Status(ctx)
		require.NoError(t, err)
		assert.True(t, st.Running, "state %s", st.State)
	})

	t.Run("guest reboot", func(t *testing.T) {
		ctx := testCtx(t, 2*bootTime)
		// The plain test guest ends each boot with `reboot -f`.
		cfg := guestConfig(t, "reboot", guestimage.BzImage(t), guestimage.Initramfs(t))
		cfg.NoReboot = false
		vm := startVM(t, ctx, cfg)
		con := attachConsole(t, ctx, vm)
		require.NoError(t, vm.Resume(ctx))
		i := con.waitContains(t, ctx, 0, booted)
		con.waitContains(t, ctx, i+1, booted)
		st, err := vm.Status(ctx)
		require.NoError(t, err)
		assert.Nil(t, st.Exit, "QEMU runs on")
	})
}
