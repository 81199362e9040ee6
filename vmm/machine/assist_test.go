package machine

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestKernelModeInstructionsComplete runs, at CPL 0, instructions this kind
// of host's KVM emulator rejects (popcnt, lock cmpxchg16b, xsetbv, xsave,
// xrstor) and checks their architectural results. On hardware with VT-x/SVM
// they run natively and the results are the same; on a host that emulates
// kernel mode they only come out right if the VMM's assists complete them.
func TestKernelModeInstructionsComplete(t *testing.T) {
	const data = 0x200000
	code := cat(
		[]byte{0x48, 0xc7, 0xc0, 0xf0, 0xf0, 0x00, 0x00},                   // mov rax, 0xf0f0
		[]byte{0xf3, 0x48, 0x0f, 0xb8, 0xd8},                               // popcnt rbx, rax
		[]byte{0x48, 0x89, 0x1c, 0x25, 0x00, 0x00, 0x20, 0x00},             // mov [data+0x00], rbx
		[]byte{0xf3, 0x48, 0x0f, 0xb8, 0x14, 0x25, 0x00, 0x01, 0x20, 0x00}, // popcnt rdx, [data+0x100]
		[]byte{0x48, 0x89, 0x14, 0x25, 0x08, 0x00, 0x20, 0x00},             // mov [data+0x08], rdx
		[]byte{0x48, 0xc7, 0xc0, 0x01, 0x00, 0x00, 0x00},                   // mov rax, 1
		[]byte{0x48, 0xc7, 0xc2, 0x02, 0x00, 0x00, 0x00},                   // mov rdx, 2
		[]byte{0x48, 0xc7, 0xc3, 0x03, 0x00, 0x00, 0x00},                   // mov rbx, 3
		[]byte{0x48, 0xc7, 0xc1, 0x04, 0x00, 0x00, 0x00},                   // mov rcx, 4
		[]byte{0xf0, 0x48, 0x0f, 0xc7, 0x0c, 0x25, 0x00, 0x02, 0x20, 0x00}, // lock cmpxchg16b [data+0x200]: {1,2} -> {3,4}
		[]byte{0x9c, 0x58}, // pushfq; pop rax
		[]byte{0x48, 0x89, 0x04, 0x25, 0x10, 0x00, 0x20, 0x00},             // mov [data+0x10], rax (flags)
		[]byte{0x48, 0xc7, 0xc0, 0x01, 0x00, 0x00, 0x00},                   // mov rax, 1
		[]byte{0x48, 0xc7, 0xc2, 0x02, 0x00, 0x00, 0x00},                   // mov rdx, 2
		[]byte{0xf0, 0x48, 0x0f, 0xc7, 0x0c, 0x25, 0x00, 0x02, 0x20, 0x00}, // lock cmpxchg16b again: fails, loads {3,4}
		[]byte{0x48, 0x89, 0x04, 0x25, 0x18, 0x00, 0x20, 0x00},             // mov [data+0x18], rax
		[]byte{0x48, 0x89, 0x14, 0x25, 0x20, 0x00, 0x20, 0x00},             // mov [data+0x20], rdx
		// enable SSE and XSAVE: CR4 |= OSFXSR | OSXMMEXCPT | OSXSAVE; XCR0 = x87|SSE
		[]byte{0x0f, 0x20, 0xe0},                                     // mov rax, cr4
		[]byte{0x48, 0x0d, 0x00, 0x06, 0x04, 0x00},                   // or rax, 0x40600
		[]byte{0x0f, 0x22, 0xe0},                                     // mov cr4, rax
		[]byte{0x31, 0xc9},                                           // xor ecx, ecx
		[]byte{0xb8, 0x03, 0x00, 0x00, 0x00},                         // mov eax, 3
		[]byte{0x31, 0xd2},                                           // xor edx, edx
		[]byte{0x0f, 0x01, 0xd1},                                     // xsetbv
		[]byte{0xf3, 0x0f, 0x6f, 0x04, 0x25, 0x00, 0x03, 0x20, 0x00}, // movdqu xmm0, [data+0x300]
		[]byte{0xb8, 0x03, 0x00, 0x00, 0x00},                         // mov eax, 3 (RFBM)
		[]byte{0x0f, 0xae, 0x24, 0x25, 0x00, 0x10, 0x20, 0x00},       // xsave [data+0x1000]
		[]byte{0xf3, 0x0f, 0x6f, 0x04, 0x25, 0x20, 0x03, 0x20, 0x00}, // movdqu xmm0, [data+0x320] (zeros)
		[]byte{0x0f, 0xae, 0x2c, 0x25, 0x00, 0x10, 0x20, 0x00},       // xrstor [data+0x1000]
		[]byte{0xf3, 0x0f, 0x7f, 0x04, 0x25, 0x10, 0x03, 0x20, 0x00}, // movdqu [data+0x310], xmm0
		[]byte{0xb0, 0xfe, 0xe6, 0x64},                               // mov al, 0xfe; out 0x64, al: reset, ends the VM
		[]byte{0xf4, 0xeb, 0xfd},                                     // hlt; jmp back
	)
	m, err := New(Config{CPUs: 1, MemoryBytes: 32 << 20, Kernel: boottest.TinyELF(code, 0x100000)})
	require.NoError(t, err)
	defer m.Close()
	mem := m.Memory()
	require.NoError(t, mem.PutUint64(data+0x100, 0x8000000000000fff)) // 13 bits set
	require.NoError(t, mem.PutUint64(data+0x200, 1))
	require.NoError(t, mem.PutUint64(data+0x208, 2))
	pattern := []byte("kubevmm-xmm0-val")
	require.NoError(t, mem.WriteAt(pattern, data+0x300))

	exit := m.Run()
	require.Equal(t, ExitReset, exit.Reason, "guest code ran to its reset: %v", exit)

	u64 := func(a uint64) uint64 { v, err := mem.Uint64(a); require.NoError(t, err); return v }
	assert.Equal(t, uint64(8), u64(data), "popcnt of a register")
	assert.Equal(t, uint64(13), u64(data+0x08), "popcnt of a memory operand")
	assert.Equal(t, uint64(3), u64(data+0x200), "cmpxchg16b stored the new low half")
	assert.Equal(t, uint64(4), u64(data+0x208), "and the new high half")
	assert.NotZero(t, u64(data+0x10)&0x40, "ZF set after a successful cmpxchg16b")
	assert.Equal(t, uint64(3), u64(data+0x18), "a failed cmpxchg16b loads the current value into rdx:rax")
	assert.Equal(t, uint64(4), u64(data+0x20))
	got := make([]byte, 16)
	require.NoError(t, mem.ReadAt(got, data+0x310))
	assert.Equal(t, pattern, got, "xrstor brought back the xmm0 that xsave stored")
	area := make([]byte, 16)
	require.NoError(t, mem.ReadAt(area, data+0x1000+160))
	assert.Equal(t, pattern, area, "xsave wrote xmm0 at offset 160 of the area")
	bv, _ := mem.Uint64(data + 0x1000 + 512)
	assert.NotZero(t, bv&2, "XSTATE_BV marks SSE state as saved")

	counts := m.Assist.Counts()
	t.Logf("assists on this host: %v (nested profile: %v)", counts, m.Nested)
	if m.Nested {
		assert.NotZero(t, m.Assist.Total(), "on a host that emulates kernel mode these instructions need assists")
	}
}

// TestGuestPanicIsAFailureNotAReboot: a guest kernel that panics (with
// panic=-1) resets through the same i8042 line as a requested reboot; the
// VM must still end as a failure naming the panic.
func TestGuestPanicIsAFailureNotAReboot(t *testing.T) {
	msg := "Kernel panic - not syncing: VFS: Unable to mount root fs\r\n"
	var code []byte
	for _, c := range []byte(msg) {
		code = append(code, 0xb0, c, 0x66, 0xba, 0xf8, 0x03, 0xee) // mov al, c; mov dx, 0x3f8; out dx, al
	}
	code = append(code, 0xb0, 0xfe, 0xe6, 0x64, 0xf4) // reset; hlt
	var out bytes.Buffer
	m, err := New(Config{CPUs: 1, MemoryBytes: 32 << 20, Kernel: boottest.TinyELF(code, 0x100000), Console: &out})
	require.NoError(t, err)
	defer m.Close()
	exit := m.Run()
	assert.Equal(t, ExitPanic, exit.Reason)
	assert.True(t, exit.Failed())
	assert.ErrorContains(t, exit.Err, "guest kernel panicked: Kernel panic - not syncing: VFS: Unable to mount root fs")
	assert.Equal(t, msg, out.String(), "the console still gets everything")
}

func TestPanicWatchAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	p := &panicWatch{w: &out}
	for _, c := range []byte("boot ok\nKernel pan") {
		p.Write([]byte{c})
	}
	_, ok := p.panicked()
	assert.False(t, ok)
	p.Write([]byte("ic - not syncing: x\nmore\n"))
	line, ok := p.panicked()
	assert.True(t, ok)
	assert.Equal(t, "Kernel panic - not syncing: x", line)
}
