package kvm

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openKVM(t *testing.T) *System {
	t.Helper()
	s, err := Open("/dev/kvm")
	require.NoError(t, err, "these tests need /dev/kvm")
	t.Cleanup(func() { s.Close() })
	return s
}

// realModeVM builds a VM with one page of RAM at 0 holding code, and one
// vCPU in real mode at CS:IP 0:0.
func realModeVM(t *testing.T, code []byte, flags uint32) (*VM, *VCPU, []byte) {
	t.Helper()
	s := openKVM(t)
	vm, err := s.CreateVM()
	require.NoError(t, err)
	t.Cleanup(func() { vm.Close() })
	mem, err := unix.Mmap(-1, 0, 0x4000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(mem) })
	copy(mem, code)
	require.NoError(t, vm.SetUserMemoryRegion(UserspaceMemoryRegion{
		Slot: 0, Flags: flags, GuestPhysAddr: 0, MemorySize: uint64(len(mem)), UserspaceAddr: uint64(uintptrOf(mem)),
	}))
	c, err := vm.CreateVCPU(0)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	sr, err := c.GetSregs()
	require.NoError(t, err)
	sr.CS.Base, sr.CS.Selector = 0, 0
	require.NoError(t, c.SetSregs(sr))
	require.NoError(t, c.SetRegs(&Regs{RIP: 0, RFLAGS: 2}))
	return vm, c, mem
}

func TestOpenReportsMissingDevice(t *testing.T) {
	_, err := Open("/nonexistent/kvm")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNoKVM))
	_, err = Open(os.DevNull) // exists, but isn't KVM
	assert.True(t, errors.Is(err, ErrNoKVM))
}

func TestSupportedCPUIDAndMSRs(t *testing.T) {
	s := openKVM(t)
	cpuid, err := s.SupportedCPUID()
	require.NoError(t, err)
	var leaf0 *CPUIDEntry
	for i := range cpuid {
		if cpuid[i].Function == 0 {
			leaf0 = &cpuid[i]
		}
	}
	require.NotNil(t, leaf0, "leaf 0 is always supported")
	assert.NotZero(t, leaf0.EAX, "max basic leaf")
	msrs, err := s.MSRIndexList()
	require.NoError(t, err)
	assert.Contains(t, msrs, uint32(0xc0000082), "LSTAR is saved by KVM")
	n, err := s.CheckExtension(CapIRQChip)
	require.NoError(t, err)
	assert.NotZero(t, n)
}

func TestRealModeGuestPortIOAndHalt(t *testing.T) {
	code := []byte{
		0xb0, 0x42, // mov al, 0x42
		0xe6, 0x10, // out 0x10, al
		0xe4, 0x11, // in al, 0x11
		0xa2, 0x00, 0x20, // mov [0x2000], al
		0xf4, // hlt
	}
	_, c, mem := realModeVM(t, code, 0)
	require.NoError(t, c.Run())
	require.Equal(t, ExitIO, c.ExitReason())
	out, err := c.IO()
	require.NoError(t, err)
	assert.True(t, out.Out)
	assert.Equal(t, uint16(0x10), out.Port)
	assert.Equal(t, []byte{0x42}, out.Data)

	require.NoError(t, c.Run())
	in, err := c.IO()
	require.NoError(t, err)
	require.False(t, in.Out)
	assert.Equal(t, uint16(0x11), in.Port)
	in.Data[0] = 0x99 // our answer to the guest's IN

	require.NoError(t, c.Run())
	assert.Equal(t, ExitHLT, c.ExitReason(), "without an in-kernel LAPIC, HLT exits")
	assert.Equal(t, byte(0x99), mem[0x2000], "the value userspace supplied reached the guest")
	r, err := c.GetRegs()
	require.NoError(t, err)
	assert.Equal(t, uint64(len(code)), r.RIP)
}

func TestDirtyLogSeesGuestWrites(t *testing.T) {
	code := []byte{
		0xb0, 0x01, // mov al, 1
		0xa2, 0x00, 0x30, // mov [0x3000], al  (page 3)
		0xf4,
	}
	vm, c, _ := realModeVM(t, code, MemLogDirtyPages)
	bitmap := make([]uint64, 1)
	require.NoError(t, vm.GetDirtyLog(0, bitmap)) // clears what setup dirtied
	require.NoError(t, c.Run())
	require.Equal(t, ExitHLT, c.ExitReason())
	require.NoError(t, vm.GetDirtyLog(0, bitmap))
	assert.NotZero(t, bitmap[0]&(1<<3), "page 3 written by the guest is dirty: %#b", bitmap[0])
	require.NoError(t, vm.GetDirtyLog(0, bitmap))
	assert.Zero(t, bitmap[0]&(1<<3), "and clean again after the log was read")
}

func TestImmediateExitKicksVCPU(t *testing.T) {
	_, c, _ := realModeVM(t, []byte{0xeb, 0xfe}, 0) // jmp $
	c.SetImmediateExit(true)
	assert.ErrorIs(t, c.Run(), ErrInterrupted)
	c.SetImmediateExit(false)

	// A vCPU spinning in the guest leaves KVM_RUN when its thread is signalled.
	done := make(chan error, 1)
	tid := make(chan int, 1)
	go func() {
		lockThread()
		tid <- unix.Gettid()
		for {
			err := c.Run()
			if err != nil {
				done <- err
				return
			}
		}
	}()
	id := <-tid
	c.SetImmediateExit(true)
	require.NoError(t, unix.Tgkill(unix.Getpid(), id, unix.SIGURG))
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrInterrupted)
	case <-time.After(60 * time.Second):
		t.Fatal("vCPU did not leave KVM_RUN after immediate_exit + signal")
	}
}

func TestRegisterRoundTrips(t *testing.T) {
	_, c, _ := realModeVM(t, []byte{0xf4}, 0)
	fpu := &FPU{FCW: 0x37f, MXCSR: 0x1f80}
	fpu.XMM[3][0] = 0xab
	require.NoError(t, c.SetFPU(fpu))
	got, err := c.GetFPU()
	require.NoError(t, err)
	assert.Equal(t, uint8(0xab), got.XMM[3][0])
	// KVM_GET_FPU leaves mxcsr out (a long-standing KVM quirk); the XSAVE
	// image, which snapshots use, carries it.
	xsave, err := c.GetXSave()
	require.NoError(t, err)
	assert.Equal(t, uint32(0x1f80), binary.LittleEndian.Uint32(xsave.Bytes()[24:]))

	require.NoError(t, c.SetMSR(0xc0000082, 0xffffffff81000000))
	v, err := c.GetMSR(0xc0000082)
	require.NoError(t, err)
	assert.Equal(t, uint64(0xffffffff81000000), v)

	ev, err := c.GetVCPUEvents()
	require.NoError(t, err)
	require.NoError(t, c.SetVCPUEvents(ev))
	mp, err := c.GetMPState()
	require.NoError(t, err)
	require.NoError(t, c.SetMPState(mp))
	dr, err := c.GetDebugRegs()
	require.NoError(t, err)
	require.NoError(t, c.SetDebugRegs(dr))
	xs, err := c.GetXSave()
	require.NoError(t, err)
	require.NoError(t, c.SetXSave(xs))
	xc, err := c.GetXCRs()
	require.NoError(t, err)
	require.NoError(t, c.SetXCRs(xc))
}
