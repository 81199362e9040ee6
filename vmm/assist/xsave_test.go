package assist

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

var (
	xsave64  = []byte{0x48, 0x0f, 0xae, 0x27} // xsave64 [rdi]
	xsaveopt = []byte{0x0f, 0xae, 0x37}       // xsaveopt [rdi]
	xsavec   = []byte{0x48, 0x0f, 0xc7, 0x27} // xsavec64 [rdi]
	xrstor64 = []byte{0x48, 0x0f, 0xae, 0x2f} // xrstor64 [rdi]
)

// The extended components of testLayout: standard offset and size.
var testComponents = []struct{ i, off, size int }{{2, 576, 256}, {5, 1088, 64}, {6, 1152, 512}, {7, 1664, 1024}}

// fillState puts a recognisable register state (every saved byte
// non-zero, every component in use) into the fake's XSAVE buffer and
// returns a copy of it.
func fillState(e *env, seed byte) []byte {
	k := e.c.xsave.Bytes()
	clear(k)
	fill := func(from, to int) {
		for i := from; i < to; i++ {
			k[i] = byte(i)*7 + seed | 1
		}
	}
	fill(0, 24)   // x87 control/status
	fill(32, 416) // ST0-7, XMM0-15
	for _, c := range testComponents {
		fill(c.off, c.off+c.size) // AVX, opmask, ZMM_Hi256, Hi16_ZMM (832-1088 is MPX: not in the layout)
	}
	le := binary.LittleEndian
	le.PutUint32(k[xsMXCSR:], 0x1f80|uint32(seed&0x3f))
	le.PutUint32(k[xsMXCSRMask:], 0xffff)
	le.PutUint64(k[xsHeader:], 0xe7)
	return bytes.Clone(k)
}

// clobber overwrites what XRSTOR restores, keeping what it must not touch.
func clobber(e *env) {
	k := e.c.xsave.Bytes()
	ranges := [][2]int{{0, 24}, {32, 416}}
	for _, c := range testComponents {
		ranges = append(ranges, [2]int{c.off, c.off + c.size})
	}
	for _, r := range ranges {
		for i := r[0]; i < r[1]; i++ {
			k[i] = 0x5a
		}
	}
	binary.LittleEndian.PutUint32(k[xsMXCSR:], 0x1f80)
	binary.LittleEndian.PutUint64(k[xsHeader:], 0)
}

// sameBytes compares byte slices, reporting the first difference instead
// of dumping kilobytes.
func sameBytes(t *testing.T, want, got []byte, msg string, args ...any) bool {
	t.Helper()
	if bytes.Equal(want, got) {
		return true
	}
	if len(want) != len(got) {
		return assert.Fail(t, fmt.Sprintf(msg, args...), "length %d, want %d", len(got), len(want))
	}
	i := 0
	for want[i] == got[i] {
		i++
	}
	end := min(i+16, len(want))
	return assert.Fail(t, fmt.Sprintf(msg, args...), "first difference at offset %d (%#x): got % x, want % x", i, i, got[i:end], want[i:end])
}

func (e *env) runAt(code []byte, want Kind) {
	e.t.Helper()
	e.setCPL(0)
	e.code(code...)
	e.mustRun(want)
}

func TestXSAVERoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		save []byte
		kind Kind
	}{
		{"standard", xsave64, KindXSAVE},
		{"xsaveopt", xsaveopt, KindXSAVE},
		{"compacted", xsavec, KindXSAVEC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			orig := fillState(e, 0x10)
			e.c.regs.RDI = kernData
			e.c.regs.RAX, e.c.regs.RDX = 0xffffffff, 0xffffffff
			e.runAt(tc.save, tc.kind)
			assert.Nil(t, e.exception())
			assert.Equal(t, kernCode+uint64(len(tc.save)), e.c.regs.RIP)

			area := e.read(dataGPA, memory.PageSize)
			sameBytes(t, orig[:24], area[:24], "x87 control saved")
			sameBytes(t, orig[24:416], area[24:416], "MXCSR, ST and XMM saved")
			assert.Equal(t, uint64(0xe7), binary.LittleEndian.Uint64(area[xsHeader:]), "XSTATE_BV")
			if tc.kind == KindXSAVEC {
				assert.Equal(t, uint64(1<<63|0xe7), binary.LittleEndian.Uint64(area[xsHeader+8:]), "XCOMP_BV")
				// packed in component order from 576: 256 + 64 + 512 + 1024 bytes
				for j, off := range []int{576, 832, 896, 1408} {
					c := testComponents[j]
					sameBytes(t, orig[c.off:c.off+c.size], area[off:off+c.size], "component %d", c.i)
				}
				assert.True(t, allZero(area[2432:]), "nothing written past the compacted area")
			} else {
				assert.Zero(t, binary.LittleEndian.Uint64(area[xsHeader+8:]), "XCOMP_BV")
				sameBytes(t, orig[576:2688], area[576:2688], "components at their standard offsets")
			}

			clobber(e)
			require.NotEqual(t, orig, e.c.xsave.Bytes())
			e.runAt(xrstor64, KindXRSTOR)
			assert.Nil(t, e.exception())
			sameBytes(t, orig, e.c.xsave.Bytes(), "XRSTOR restored exactly the saved state")
			assert.Equal(t, kernCode+uint64(len(xrstor64)), e.c.regs.RIP)
		})
	}
}

func TestXSAVEPartial(t *testing.T) {
	t.Run("standard RFBM x87|SSE leaves the rest of the area", func(t *testing.T) {
		e := newEnv(t, 0)
		orig := fillState(e, 0x20)
		for i := uint64(0); i < memory.PageSize; i += 8 {
			e.put64(dataGPA+i, 0xeeeeeeeeeeeeeeee)
		}
		e.put64(dataGPA+xsHeader, 0x4) // XSTATE_BV bits outside RFBM are kept
		e.put64(dataGPA+xsHeader+8, 0)
		e.put64(dataGPA+xsHeader+16, 0)
		e.c.regs.RDI, e.c.regs.RAX = kernData, 0x3
		e.runAt(xsave64, KindXSAVE)
		area := e.read(dataGPA, memory.PageSize)
		sameBytes(t, orig[:416], area[:416], "x87 and SSE state saved")
		assert.Equal(t, uint64(0x7), binary.LittleEndian.Uint64(area[xsHeader:]), "XSTATE_BV = old AVX bit | saved x87|SSE")
		sameBytes(t, bytes.Repeat([]byte{0xee}, 2688-576), area[576:2688], "AVX and AVX-512 areas not written")
		sameBytes(t, bytes.Repeat([]byte{0xee}, 512-416), area[416:512], "reserved legacy bytes not written")
	})
	t.Run("RFBM is masked by XCR0", func(t *testing.T) {
		e := newEnv(t, 0)
		fillState(e, 0x20)
		e.c.setXCR0(0x3)
		e.c.regs.RDI, e.c.regs.RAX = kernData, 0xff
		e.runAt(xsave64, KindXSAVE)
		area := e.read(dataGPA, memory.PageSize)
		assert.Equal(t, uint64(0x3), binary.LittleEndian.Uint64(area[xsHeader:]))
		assert.True(t, allZero(area[576:]), "no component outside XCR0 written")
	})
	t.Run("compacted RFBM x87|SSE|opmask packs opmask at 576", func(t *testing.T) {
		e := newEnv(t, 0)
		orig := fillState(e, 0x30)
		e.c.regs.RDI, e.c.regs.RAX = kernData, 0x23
		e.runAt(xsavec, KindXSAVEC)
		area := e.read(dataGPA, memory.PageSize)
		assert.Equal(t, uint64(0x23), binary.LittleEndian.Uint64(area[xsHeader:]))
		assert.Equal(t, uint64(1<<63|0x23), binary.LittleEndian.Uint64(area[xsHeader+8:]))
		sameBytes(t, orig[1088:1152], area[576:640], "opmask packed first")
		assert.True(t, allZero(area[640:]))

		// restoring it brings back opmask and leaves AVX alone (not in RFBM)
		clobber(e)
		k := e.c.xsave.Bytes()
		avx := bytes.Clone(k[576:832])
		e.runAt(xrstor64, KindXRSTOR)
		sameBytes(t, orig[1088:1152], k[1088:1152], "opmask restored")
		sameBytes(t, avx, k[576:832], "AVX outside RFBM untouched")
		sameBytes(t, orig[:416], k[:416], "x87 and SSE restored")
	})
	t.Run("XRSTOR of components not in XSTATE_BV loads their init state", func(t *testing.T) {
		e := newEnv(t, 0)
		fillState(e, 0x40)
		e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
		e.runAt(xsave64, KindXSAVE)
		e.put64(dataGPA+xsHeader, 0x2) // only SSE in use
		e.runAt(xrstor64, KindXRSTOR)
		k := e.c.xsave.Bytes()
		assert.Equal(t, uint16(0x37f), binary.LittleEndian.Uint16(k[0:]), "x87 init: FCW 0x37f")
		assert.True(t, allZero(k[2:24]), "x87 init: status, tags, pointers zero")
		assert.True(t, allZero(k[32:160]), "x87 init: ST regs zero")
		assert.False(t, allZero(k[160:416]), "XMM loaded")
		assert.True(t, allZero(k[576:2688]), "AVX/AVX-512 init: zero")
		assert.Equal(t, uint64(0x2), binary.LittleEndian.Uint64(k[xsHeader:]))
	})
	t.Run("XRSTOR with RFBM AVX only loads MXCSR and AVX", func(t *testing.T) {
		e := newEnv(t, 0)
		orig := fillState(e, 0x50)
		e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
		e.runAt(xsave64, KindXSAVE)
		clobber(e)
		want := bytes.Clone(e.c.xsave.Bytes())
		copy(want[xsMXCSR:xsMXCSR+4], orig[xsMXCSR:])
		copy(want[576:832], orig[576:832])
		binary.LittleEndian.PutUint64(want[xsHeader:], 0x4)
		e.c.regs.RAX, e.c.regs.RDX = 0x4, 0
		e.runAt(xrstor64, KindXRSTOR)
		sameBytes(t, want, e.c.xsave.Bytes(), "only MXCSR and AVX loaded")
	})
}

func TestXSAVECAlignment(t *testing.T) {
	// Components with the "64-byte aligned" bit start on a 64-byte
	// boundary in the compacted form: 2 (256 bytes), 9 (8 bytes), 17
	// (aligned, 64 bytes) pack at 576, 832 and 896 (not 840).
	var l x86.XSaveLayout
	l.Mask = 1<<17 | 1<<9 | 0x7
	l.Size[2], l.Offset[2] = 256, 576
	l.Size[9], l.Offset[9] = 8, 2688
	l.Size[17], l.Offset[17], l.Align64[17] = 64, 2752, true
	e := newEnv(t, 0)
	e.a = New(e.mem, l)
	e.c.setXCR0(l.Mask)
	k := e.c.xsave.Bytes()
	for i := range k[576:2816] {
		k[576+i] = byte(i) | 0x80
	}
	binary.LittleEndian.PutUint64(k[xsHeader:], l.Mask)
	orig := bytes.Clone(k)
	for i := uint64(0); i < memory.PageSize; i += 8 {
		e.put64(dataGPA+i, 0xeeeeeeeeeeeeeeee)
	}
	// XSAVEC writes only XSTATE_BV and XCOMP_BV of the header: the rest
	// must already be zero for XRSTOR to take it (Linux clears it first)
	require.NoError(t, e.mem.WriteAt(make([]byte, 64), dataGPA+xsHeader))
	e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
	e.runAt(xsavec, KindXSAVEC)
	require.Nil(t, e.exception())
	area := e.read(dataGPA, memory.PageSize)
	sameBytes(t, orig[576:832], area[576:832], "component 2")
	sameBytes(t, orig[2688:2696], area[832:840], "component 9")
	sameBytes(t, bytes.Repeat([]byte{0xee}, 56), area[840:896], "alignment padding not written")
	sameBytes(t, orig[2752:2816], area[896:960], "component 17 on a 64-byte boundary")

	clear(k[576:2816])
	e.runAt(xrstor64, KindXRSTOR)
	require.Nil(t, e.exception())
	k = e.c.xsave.Bytes()
	for _, r := range [][2]int{{576, 832}, {2688, 2696}, {2752, 2816}} {
		sameBytes(t, orig[r[0]:r[1]], k[r[0]:r[1]], "component at %d restored from the compacted area", r[0])
	}
}

func TestXRSTORBadHeaderGP(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  [8]uint64
	}{
		{"standard: XSTATE_BV bit outside XCR0", [8]uint64{0x207}},
		{"standard: XCOMP_BV without the compacted bit", [8]uint64{0x3, 0x3}},
		{"standard: reserved bytes 16-23", [8]uint64{0x3, 0, 1}},
		{"compacted: XCOMP_BV bit outside XCR0", [8]uint64{0x3, 1<<63 | 0x203}},
		{"compacted: XSTATE_BV not in XCOMP_BV", [8]uint64{0x7, 1<<63 | 0x3}},
		{"compacted: reserved bytes 16-63", [8]uint64{0x3, 1<<63 | 0x3, 0, 0, 0, 0, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			orig := fillState(e, 0x60)
			for i, v := range tc.hdr {
				e.put64(dataGPA+xsHeader+uint64(8*i), v)
			}
			e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
			e.runAt(xrstor64, KindXRSTOR)
			assert.Equal(t, exGP0, e.exception())
			assert.Equal(t, uint64(kernCode), e.c.regs.RIP)
			sameBytes(t, orig, e.c.xsave.Bytes(), "register state unchanged")
		})
	}
}

func TestXSAVEFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		code  []byte
		kind  Kind
		setup func(e *env)
		ex    *injected
		cr2   uint64
	}{
		{"misaligned xsave", xsave64, KindXSAVE, func(e *env) { e.c.regs.RDI = kernData + 0x20 }, exGP0, 0},
		{"misaligned xrstor", xrstor64, KindXRSTOR, func(e *env) { e.c.regs.RDI = kernData + 0x10 }, exGP0, 0},
		{"misaligned xsavec", xsavec, KindXSAVEC, func(e *env) { e.c.regs.RDI = kernData + 0x8 }, exGP0, 0},
		{"xsave without CR4.OSXSAVE", xsave64, KindXSAVE, func(e *env) { e.c.sregs.CR4 &^= cr4OSXSAVE }, exUD, 0},
		{"xrstor with reserved MXCSR bits", xrstor64, KindXRSTOR, func(e *env) {
			e.put64(dataGPA+xsHeader, 0x3)
			require.NoError(t, e.mem.PutUint32(dataGPA+xsMXCSR, 0x10000|0x1f80))
		}, exGP0, 0},
		{"xsave area runs into a not-present page", xsave64, KindXSAVE, func(e *env) {
			e.c.regs.RDI = kernData + 0x800 // 2688 bytes: ends in the next, unmapped page
		}, exPF(pfWrite), kernData + memory.PageSize},
		{"xsave to a read-only page", xsave64, KindXSAVE, func(e *env) {
			e.mapPage(kernData, dataGPA, pteP)
		}, exPF(pfPresent | pfWrite), kernData},
		{"xrstor header on a not-present page", xrstor64, KindXRSTOR, func(e *env) {
			e.c.regs.RDI = kernData + 0xe00 // header at +0x1000
		}, exPF(0), kernData + memory.PageSize},
		{"xsavec to a user page with SMAP", xsavec, KindXSAVEC, func(e *env) {
			e.c.sregs.CR4 |= cr4SMAP
			e.c.regs.RDI = userData
		}, exPF(pfPresent | pfWrite), userData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			orig := fillState(e, 0x70)
			e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
			tc.setup(e)
			mem := e.read(dataGPA, 2*memory.PageSize)
			e.code(tc.code...)
			e.mustRun(tc.kind)
			assert.Equal(t, tc.ex, e.exception())
			assert.Equal(t, tc.cr2, e.c.sregs.CR2)
			assert.Equal(t, uint64(kernCode), e.c.regs.RIP)
			sameBytes(t, orig, e.c.xsave.Bytes(), "register state unchanged")
			sameBytes(t, mem, e.read(dataGPA, 2*memory.PageSize), "memory untouched")
		})
	}
}

func TestXSAVEUserMode(t *testing.T) {
	// Signal delivery saves user state from the kernel, but user code can
	// run XSAVE itself: user pages, user permissions.
	e := newEnv(t, 3)
	orig := fillState(e, 0x80)
	e.code(xsave64...)
	e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = userData, 0xffffffff, 0xffffffff
	e.mustRun(KindXSAVE)
	assert.Nil(t, e.exception())
	sameBytes(t, orig[576:2688], e.read(dataGPA+576, 2688-576), "components saved to the user page")

	e = newEnv(t, 3)
	fillState(e, 0x80)
	e.code(xsave64...)
	e.c.regs.RDI, e.c.regs.RAX = kernData, 0x3
	e.mustRun(KindXSAVE)
	assert.Equal(t, exPF(pfPresent|pfWrite|pfUser), e.exception())
}

func TestXSAVELayoutBeyondKVMBuffer(t *testing.T) {
	// A layout (from CPUID, not the guest) whose component lies past
	// KVM's 4 KiB buffer must stop the VM with an error, not panic.
	var l x86.XSaveLayout
	l.Mask = 1<<9 | 0x3
	l.Size[9], l.Offset[9] = 64, 4096-32
	for _, code := range [][]byte{xsavec, xrstor64} {
		t.Run(fmt.Sprintf("% x", code), func(t *testing.T) {
			e := newEnv(t, 0)
			e.a = New(e.mem, l)
			e.c.setXCR0(l.Mask)
			e.put64(dataGPA+xsHeader, 0x3)
			e.put64(dataGPA+xsHeader+8, 1<<63|0x203)
			e.c.regs.RDI, e.c.regs.RAX, e.c.regs.RDX = kernData, 0xffffffff, 0xffffffff
			e.code(code...)
			_, err := e.run()
			require.Error(t, err)
			assert.Nil(t, e.exception())
		})
	}
}

var (
	ldmxcsr = []byte{0x0f, 0xae, 0x17} // ldmxcsr [rdi]
	stmxcsr = []byte{0x0f, 0xae, 0x1f} // stmxcsr [rdi]
)

func TestMXCSR(t *testing.T) {
	mxcsrOf := func(e *env) uint32 { return binary.LittleEndian.Uint32(e.c.xsave.Bytes()[xsMXCSR:]) }
	exNM := &injected{Vector: vecNM}
	for _, tc := range []struct {
		name  string
		code  []byte
		setup func(e *env)
		kind  Kind
		ex    *injected
		check func(t *testing.T, e *env)
	}{
		{
			name: "stmxcsr stores MXCSR", code: stmxcsr, kind: KindSTMXCSR,
			setup: func(e *env) {
				binary.LittleEndian.PutUint32(e.c.xsave.Bytes()[xsMXCSR:], 0x9fa5)
				e.put64(dataGPA+0x20, junk)
			},
			check: func(t *testing.T, e *env) {
				assert.Equal(t, uint64(0xdddddddd00009fa5), e.get64(dataGPA+0x20), "four bytes stored")
			},
		},
		{
			name: "ldmxcsr loads MXCSR and marks SSE state present", code: ldmxcsr, kind: KindLDMXCSR,
			setup: func(e *env) { e.put64(dataGPA+0x20, 0x0000ffff00007f80) },
			check: func(t *testing.T, e *env) {
				assert.Equal(t, uint32(0x7f80), mxcsrOf(e))
				assert.Equal(t, uint64(2), binary.LittleEndian.Uint64(e.c.xsave.Bytes()[xsHeader:])&2, "XSTATE_BV.SSE")
			},
		},
		{
			name: "ldmxcsr DAZ allowed by the CPU's MXCSR_MASK", code: ldmxcsr, kind: KindLDMXCSR,
			setup: func(e *env) { e.put64(dataGPA+0x20, 0x1fc0) },
			check: func(t *testing.T, e *env) { assert.Equal(t, uint32(0x1fc0), mxcsrOf(e)) },
		},
		{
			name: "ldmxcsr DAZ refused with the default mask (MXCSR_MASK 0)", code: ldmxcsr, kind: KindLDMXCSR, ex: exGP0,
			setup: func(e *env) {
				binary.LittleEndian.PutUint32(e.c.xsave.Bytes()[xsMXCSRMask:], 0)
				e.put64(dataGPA+0x20, 0x1fc0)
			},
		},
		{
			name: "ldmxcsr reserved bit #GP(0)", code: ldmxcsr, kind: KindLDMXCSR, ex: exGP0,
			setup: func(e *env) { e.put64(dataGPA+0x20, 0x11f80) },
		},
		{
			name: "RIP-relative ldmxcsr", code: []byte{0x0f, 0xae, 0x15, 0x20, 0x00, 0x00, 0x00}, kind: KindLDMXCSR,
			setup: func(e *env) {
				// the operand is at the code page's RIP + 7 + 0x20
				require.NoError(t, e.mem.WriteAt([]byte{0x80, 0x3f, 0, 0}, codeGPA+7+0x20))
			},
			check: func(t *testing.T, e *env) { assert.Equal(t, uint32(0x3f80), mxcsrOf(e)) },
		},
		{
			name: "REX.B SIB disp8 stmxcsr [r12+8]", code: []byte{0x41, 0x0f, 0xae, 0x5c, 0x24, 0x08}, kind: KindSTMXCSR,
			setup: func(e *env) { e.c.regs.R12 = kernData + 0x18 },
			check: func(t *testing.T, e *env) { assert.Equal(t, uint64(0x1f80), e.get64(dataGPA+0x20)) },
		},
		{
			name: "CR4.OSFXSR clear #UD", code: ldmxcsr, kind: KindLDMXCSR, ex: exUD,
			setup: func(e *env) { e.c.sregs.CR4 &^= cr4OSFXSR },
		},
		{
			name: "CR0.EM set #UD", code: stmxcsr, kind: KindSTMXCSR, ex: exUD,
			setup: func(e *env) { e.c.sregs.CR0 |= cr0EM | cr0TS },
		},
		{
			name: "LOCK prefix #UD", code: append([]byte{0xf0}, ldmxcsr...), kind: KindLDMXCSR, ex: exUD,
		},
		{
			name: "CR0.TS set #NM", code: ldmxcsr, kind: KindLDMXCSR, ex: exNM,
			setup: func(e *env) { e.c.sregs.CR0 |= cr0TS },
		},
		{
			name: "stmxcsr to a read-only page #PF", code: stmxcsr, kind: KindSTMXCSR, ex: exPF(pfPresent | pfWrite),
			setup: func(e *env) {
				e.mapPage(kernData+memory.PageSize, dataGPA+memory.PageSize, pteP)
				e.c.regs.RDI = kernData + memory.PageSize
				e.put64(dataGPA+memory.PageSize, junk)
			},
			check: func(t *testing.T, e *env) { assert.Equal(t, uint64(junk), e.get64(dataGPA+memory.PageSize)) },
		},
		{
			name: "ldmxcsr across into an unmapped page #PF", code: ldmxcsr, kind: KindLDMXCSR, ex: exPF(0),
			setup: func(e *env) { e.c.regs.RDI = kernData + memory.PageSize - 2 },
		},
		{
			name: "non-canonical address #GP(0)", code: stmxcsr, kind: KindSTMXCSR, ex: exGP0,
			setup: func(e *env) { e.c.regs.RDI = 0x0000800000000000 },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.c.regs.RDI = kernData + 0x20
			if tc.setup != nil {
				tc.setup(e)
			}
			before := mxcsrOf(e)
			e.code(tc.code...)
			e.mustRun(tc.kind)
			assert.Equal(t, tc.ex, e.exception())
			if tc.ex != nil {
				assert.Equal(t, uint64(kernCode), e.c.regs.RIP, "a fault leaves RIP at the instruction")
				assert.Equal(t, before, mxcsrOf(e), "a fault changes no state")
				return
			}
			assert.Equal(t, uint64(kernCode)+uint64(len(tc.code)), e.c.regs.RIP)
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}
}

func TestMXCSRUserMode(t *testing.T) {
	e := newEnv(t, 3)
	e.code(stmxcsr...)
	e.c.regs.RDI = kernData
	e.mustRun(KindSTMXCSR)
	assert.Equal(t, exPF(pfPresent|pfWrite|pfUser), e.exception(), "user store to a supervisor page")
}
