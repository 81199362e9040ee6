package assist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
)

const (
	flagIF      = 1 << 9
	allArith    = flagCF | flagPF | flagAF | flagZF | flagSF | flagOF
	startFlags  = 2 | flagIF | allArith // every arithmetic flag set, so clearing shows
	preservedFl = 2 | flagIF
	junk        = 0xdddddddddddddddd
)

func TestBitCount(t *testing.T) {
	const (
		a = 0x8000000000000f00 // 64: 5 ones, msb set, 8 trailing zeros; 32/16: 0x0f00
		b = 0xffff000000010000 // 64: 17 ones; 32: 0x10000; 16: zero
	)
	type row struct {
		op    string
		size  int
		src   uint64
		res   uint64
		flags uint64
	}
	rows := []row{
		{"popcnt", 8, a, 5, 0},
		{"popcnt", 4, a, 4, 0},
		{"popcnt", 2, a, 4, 0},
		{"popcnt", 8, b, 17, 0},
		{"popcnt", 4, b, 1, 0},
		{"popcnt", 2, b, 0, flagZF},
		{"popcnt", 8, 0, 0, flagZF},
		{"lzcnt", 8, a, 0, flagZF},
		{"lzcnt", 4, a, 20, 0},
		{"lzcnt", 2, a, 4, 0},
		{"lzcnt", 8, b, 0, flagZF},
		{"lzcnt", 4, b, 15, 0},
		{"lzcnt", 2, b, 16, flagCF},
		{"lzcnt", 8, 0, 64, flagCF},
		{"lzcnt", 4, 0, 32, flagCF},
		{"lzcnt", 2, 1, 15, 0},
		{"tzcnt", 8, a, 8, 0},
		{"tzcnt", 4, a, 8, 0},
		{"tzcnt", 2, a, 8, 0},
		{"tzcnt", 4, b, 16, 0},
		{"tzcnt", 2, b, 16, flagCF},
		{"tzcnt", 8, 0, 64, flagCF},
		{"tzcnt", 8, 1, 0, flagZF},
	}
	opcodes := map[string]byte{"popcnt": 0xb8, "tzcnt": 0xbc, "lzcnt": 0xbd}
	kinds := map[string]Kind{"popcnt": KindPOPCNT, "tzcnt": KindTZCNT, "lzcnt": KindLZCNT}
	for _, r := range rows {
		for _, mem := range []bool{false, true} {
			name := fmt.Sprintf("%s/%d-bit/src=%#x/mem=%v", r.op, 8*r.size, r.src, mem)
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, 0)
				var code []byte
				if r.size == 2 {
					code = append(code, 0x66)
				}
				code = append(code, 0xf3)
				if r.size == 8 {
					code = append(code, 0x48)
				}
				modrm := byte(0xc3) // eax, ebx
				if mem {
					modrm = 0x06 // eax, [rsi]
					e.c.regs.RSI = kernData + 0x40
					e.put64(dataGPA+0x40, r.src)
					e.c.regs.RBX = junk
				} else {
					e.c.regs.RBX = r.src
				}
				code = append(code, 0x0f, opcodes[r.op], modrm)
				e.code(code...)
				e.c.regs.RAX = junk
				e.c.regs.RFLAGS = startFlags

				e.mustRun(kinds[r.op])
				want := r.res // a 32-bit write zeroes the upper half
				if r.size == 2 {
					want |= junk &^ 0xffff // a 16-bit write keeps the rest of the register
				}
				assert.Equal(t, want, e.c.regs.RAX)
				assert.Equal(t, uint64(preservedFl|r.flags), e.c.regs.RFLAGS, "flags")
				assert.Equal(t, kernCode+uint64(len(code)), e.c.regs.RIP, "RIP advanced past the instruction")
				assert.Nil(t, e.exception())
				assert.Equal(t, uint64(1), e.a.Counts()[r.op])
			})
		}
	}
}

func TestMemoryOperandForms(t *testing.T) {
	// popcnt of distinct patterns at distinct addresses proves which
	// address the decoder computed.
	tests := []struct {
		name  string
		code  []byte
		setup func(e *env)
		addr  uint64 // guest-physical address of the operand
	}{
		{"base+index*8+disp8", []byte{0xf3, 0x48, 0x0f, 0xb8, 0x44, 0xce, 0x10}, func(e *env) {
			e.c.regs.RSI, e.c.regs.RCX = kernData+0x100, 3 // rsi + rcx*8 + 0x10
		}, dataGPA + 0x128},
		{"disp32 base r13 (REX.B)", []byte{0xf3, 0x49, 0x0f, 0xb8, 0x85, 0x00, 0x02, 0x00, 0x00}, func(e *env) {
			e.c.regs.R13 = kernData + 0x10
		}, dataGPA + 0x210},
		{"index r12 (REX.X) no base", []byte{0xf3, 0x4a, 0x0f, 0xb8, 0x04, 0xa5, 0x00, 0x00, 0x00, 0x00}, func(e *env) {
			e.c.regs.R12 = (kernData + 0x300) / 4
		}, dataGPA + 0x300},
		{"RIP-relative", []byte{0xf3, 0x48, 0x0f, 0xb8, 0x05, 0xf7, 0x01, 0x00, 0x00}, func(e *env) {
			// next RIP is kernCode+9; +0x1f7 lands at kernCode+0x200
		}, codeGPA + 0x200},
		{"gs override, absolute disp32", []byte{0x65, 0xf3, 0x48, 0x0f, 0xb8, 0x04, 0x25, 0x80, 0x00, 0x00, 0x00}, func(e *env) {
			e.c.sregs.GS.Base = kernData + 0x400
		}, dataGPA + 0x480},
		{"fs override", []byte{0x64, 0xf3, 0x48, 0x0f, 0xb8, 0x06}, func(e *env) {
			e.c.sregs.FS.Base = kernData + 0x500
			e.c.regs.RSI = 8
		}, dataGPA + 0x508},
		{"0x67 truncates the address to 32 bits", []byte{0x67, 0xf3, 0x48, 0x0f, 0xb8, 0x06}, func(e *env) {
			e.mapPage(0x600000, dataGPA+0x1000, pteRW)
			e.c.regs.RSI = 0xabcd000000600040
		}, dataGPA + 0x1040},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.code(tc.code...)
			tc.setup(e)
			// a decoy everywhere else the operand could wrongly be read from
			for off := uint64(0); off < 0x2000; off += 8 {
				e.put64(dataGPA+off, 1)
			}
			val := uint64(1)<<(i+10) - 1 // i+10 one bits
			e.put64(tc.addr, val)
			e.mustRun(KindPOPCNT)
			assert.Equal(t, uint64(i+10), e.c.regs.RAX)
			assert.Equal(t, kernCode+uint64(len(tc.code)), e.c.regs.RIP)
		})
	}
}

func TestExtendedRegisters(t *testing.T) {
	e := newEnv(t, 0)
	e.code(0xf3, 0x4d, 0x0f, 0xb8, 0xc1) // popcnt r8, r9
	e.c.regs.R9 = 0xff
	e.c.regs.R8 = junk
	e.c.regs.RAX, e.c.regs.RCX = 7, 7
	e.mustRun(KindPOPCNT)
	assert.Equal(t, uint64(8), e.c.regs.R8)
	assert.Equal(t, uint64(7), e.c.regs.RAX, "legacy registers untouched")
	assert.Equal(t, uint64(7), e.c.regs.RCX)
}

func TestCLACSTAC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      byte
		kind   Kind
		before uint64
		after  uint64
	}{
		{"clac", 0xca, KindCLAC, 2 | rflagsAC, 2},
		{"stac", 0xcb, KindSTAC, 2, 2 | rflagsAC},
	} {
		t.Run(tc.name+"/cpl0", func(t *testing.T) {
			e := newEnv(t, 0)
			e.code(0x0f, 0x01, tc.m)
			e.c.regs.RFLAGS = tc.before
			e.mustRun(tc.kind)
			assert.Equal(t, tc.after, e.c.regs.RFLAGS)
			assert.Equal(t, uint64(kernCode+3), e.c.regs.RIP)
			assert.Nil(t, e.exception())
		})
		t.Run(tc.name+"/cpl3", func(t *testing.T) {
			e := newEnv(t, 3)
			e.code(0x0f, 0x01, tc.m)
			e.c.regs.RFLAGS = tc.before
			e.mustRun(tc.kind)
			assert.Equal(t, tc.before, e.c.regs.RFLAGS, "AC unchanged")
			assert.Equal(t, uint64(userCode), e.c.regs.RIP, "#UD is a fault: RIP stays")
			assert.Equal(t, exUD, e.exception())
		})
	}
}

func TestInt3(t *testing.T) {
	e := newEnv(t, 0)
	e.code(0xcc)
	e.mustRun(KindInt3)
	assert.Equal(t, uint64(kernCode+1), e.c.regs.RIP, "#BP is a trap: delivered with RIP after int3")
	assert.Equal(t, &injected{Vector: vecBP}, e.exception())
	assert.Equal(t, 1, e.c.setEvents)
}

func TestUD2(t *testing.T) {
	for _, code := range [][]byte{{0x0f, 0x0b}, {0x0f, 0xb9, 0xc0}, {0x0f, 0xff, 0xc0}} {
		t.Run(fmt.Sprintf("% x", code), func(t *testing.T) {
			e := newEnv(t, 0)
			e.code(code...)
			e.mustRun(KindUD)
			assert.Equal(t, uint64(kernCode), e.c.regs.RIP)
			assert.Equal(t, exUD, e.exception())
		})
	}
}

func TestSWAPGS(t *testing.T) {
	t.Run("cpl0 swaps", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x0f, 0x01, 0xf8)
		e.c.sregs.GS.Base = 0x1111
		e.c.msrs[x86.MSRKernelGSBase] = 0x2222
		e.mustRun(KindSWAPGS)
		assert.Equal(t, uint64(0x2222), e.c.sregs.GS.Base)
		assert.Equal(t, uint64(0x1111), e.c.msrs[x86.MSRKernelGSBase])
		assert.Equal(t, uint64(kernCode+3), e.c.regs.RIP)
	})
	t.Run("cpl3 #GP", func(t *testing.T) {
		e := newEnv(t, 3)
		e.code(0x0f, 0x01, 0xf8)
		e.c.sregs.GS.Base = 0x1111
		e.c.msrs[x86.MSRKernelGSBase] = 0x2222
		e.mustRun(KindSWAPGS)
		assert.Equal(t, exGP0, e.exception())
		assert.Equal(t, uint64(0x1111), e.c.sregs.GS.Base)
		assert.Equal(t, uint64(0x2222), e.c.msrs[x86.MSRKernelGSBase])
		assert.Equal(t, uint64(userCode), e.c.regs.RIP)
	})
}

func TestSYSRET(t *testing.T) {
	const star = uint64(0x0023) << 48 // user CS = 0x33, SS = 0x2b (Linux)
	t.Run("cpl0 returns to user mode", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x48, 0x0f, 0x07)
		e.c.msrs[x86.MSRSTAR] = star | 0x0010<<32
		e.c.regs.RCX = 0x401234
		e.c.regs.R11 = 0xffffffffffffffff
		e.mustRun(KindSYSRET)
		assert.Equal(t, uint64(0x401234), e.c.regs.RIP)
		assert.Equal(t, uint64(0x3c7fd7|2), e.c.regs.RFLAGS, "RFLAGS from R11 minus RF, VM and reserved bits")
		assert.Equal(t, uint16(0x33), e.c.sregs.CS.Selector)
		assert.Equal(t, uint16(0x2b), e.c.sregs.SS.Selector)
		assert.Equal(t, uint8(3), e.c.sregs.CS.DPL)
		assert.Equal(t, uint8(1), e.c.sregs.CS.L, "64-bit code segment")
		assert.Nil(t, e.exception())
	})
	t.Run("cpl3 #GP", func(t *testing.T) {
		e := newEnv(t, 3)
		e.code(0x48, 0x0f, 0x07)
		e.c.msrs[x86.MSRSTAR] = star
		e.c.regs.RCX = 0x401234
		e.mustRun(KindSYSRET)
		assert.Equal(t, exGP0, e.exception())
		assert.Equal(t, uint64(userCode), e.c.regs.RIP)
		assert.Equal(t, uint16(selUserCS), e.c.sregs.CS.Selector)
	})
	t.Run("non-canonical RCX #GP in kernel mode", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x48, 0x0f, 0x07)
		e.c.msrs[x86.MSRSTAR] = star
		e.c.regs.RCX = 0x0000800000000000
		e.mustRun(KindSYSRET)
		assert.Equal(t, exGP0, e.exception())
		assert.Equal(t, uint16(selKernCS), e.c.sregs.CS.Selector, "still in kernel mode")
	})
	t.Run("32-bit sysret is not completed", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x0f, 0x07)
		_, err := e.run()
		var ue *UnhandledError
		require.ErrorAs(t, err, &ue)
	})
}

func TestRDRAND(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		kind Kind
		keep uint64 // bits of RAX the write leaves alone
	}{
		{"rdrand rax", []byte{0x48, 0x0f, 0xc7, 0xf0}, KindRDRAND, 0},
		{"rdrand eax", []byte{0x0f, 0xc7, 0xf0}, KindRDRAND, 0xffffffff00000000},
		{"rdrand ax", []byte{0x66, 0x0f, 0xc7, 0xf0}, KindRDRAND, 0xffffffffffff0000},
		{"rdseed r9", []byte{0x49, 0x0f, 0xc7, 0xf9}, KindRDSEED, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[uint64]bool{}
			for i := 0; i < 4; i++ {
				e := newEnv(t, 0)
				e.code(tc.code...)
				e.c.regs.RAX, e.c.regs.R9 = junk, junk
				e.c.regs.RFLAGS = startFlags
				e.mustRun(tc.kind)
				assert.Equal(t, uint64(preservedFl|flagCF), e.c.regs.RFLAGS, "CF=1: a value was delivered")
				assert.Equal(t, kernCode+uint64(len(tc.code)), e.c.regs.RIP)
				dst := e.c.regs.RAX
				if tc.kind == KindRDSEED {
					dst = e.c.regs.R9
					assert.Equal(t, uint64(junk), e.c.regs.RAX)
				}
				if tc.keep == 0xffffffff00000000 {
					assert.Zero(t, dst>>32, "a 32-bit write zeroes the upper half")
				} else {
					assert.Equal(t, junk&tc.keep, dst&tc.keep, "a 16-bit write keeps the rest")
				}
				seen[dst] = true
			}
			assert.Greater(t, len(seen), 1, "random values repeat")
		})
	}
}

func TestRDPIDAndFSGSBase(t *testing.T) {
	t.Run("rdpid", func(t *testing.T) {
		e := newEnv(t, 3)
		e.code(0xf3, 0x0f, 0xc7, 0xf8)
		e.c.msrs[x86.MSRTSCAux] = 0xffffffff00000007
		e.c.regs.RAX = junk
		e.mustRun(KindRDPID)
		assert.Equal(t, uint64(7), e.c.regs.RAX)
	})
	t.Run("wrfsbase/rdgsbase", func(t *testing.T) {
		e := newEnv(t, 3)
		e.c.sregs.CR4 |= cr4FSGSBase
		e.code(0xf3, 0x48, 0x0f, 0xae, 0xd3) // wrfsbase rbx
		e.c.regs.RBX = 0x7fff12345000
		e.mustRun(KindWRFSBASE)
		assert.Equal(t, uint64(0x7fff12345000), e.c.sregs.FS.Base)

		e.setCPL(3)
		e.c.sregs.GS.Base = 0x1234
		e.code(0xf3, 0x0f, 0xae, 0xc9) // rdgsbase ecx
		e.c.regs.RCX = junk
		e.mustRun(KindRDGSBASE)
		assert.Equal(t, uint64(0x1234), e.c.regs.RCX)
	})
	t.Run("wrfsbase non-canonical #GP", func(t *testing.T) {
		e := newEnv(t, 3)
		e.c.sregs.CR4 |= cr4FSGSBase
		e.code(0xf3, 0x48, 0x0f, 0xae, 0xd3)
		e.c.regs.RBX = 0x0000800000000000
		e.mustRun(KindWRFSBASE)
		assert.Equal(t, exGP0, e.exception())
		assert.Zero(t, e.c.sregs.FS.Base)
	})
	t.Run("without CR4.FSGSBASE #UD", func(t *testing.T) {
		e := newEnv(t, 3)
		e.code(0xf3, 0x48, 0x0f, 0xae, 0xc0)
		e.mustRun(KindRDFSBASE)
		assert.Equal(t, exUD, e.exception())
	})
}

func TestHints(t *testing.T) {
	// fences, prefetches and cache flushes have no architectural effect on
	// coherent RAM: completing them is advancing RIP.
	for _, tc := range []struct {
		code []byte
		kind Kind
	}{
		{[]byte{0x0f, 0xae, 0xe8}, KindFence},          // lfence
		{[]byte{0x0f, 0xae, 0xf0}, KindFence},          // mfence
		{[]byte{0x0f, 0xae, 0xf8}, KindFence},          // sfence
		{[]byte{0x0f, 0x18, 0x0e}, KindPrefetch},       // prefetcht0 [rsi]
		{[]byte{0x0f, 0x0d, 0x4e, 0x40}, KindPrefetch}, // prefetchw [rsi+0x40]
		{[]byte{0x0f, 0xae, 0x3e}, KindCLFLUSH},        // clflush [rsi]
		{[]byte{0x66, 0x0f, 0xae, 0x3e}, KindCLFLUSH},  // clflushopt [rsi]
		{[]byte{0x66, 0x0f, 0xae, 0x36}, KindCLFLUSH},  // clwb [rsi]
	} {
		t.Run(fmt.Sprintf("% x", tc.code), func(t *testing.T) {
			e := newEnv(t, 0)
			e.code(tc.code...)
			e.c.regs.RSI = kernData
			before := e.c.regs
			e.mustRun(tc.kind)
			before.RIP += uint64(len(tc.code))
			assert.Equal(t, before, e.c.regs)
			assert.Nil(t, e.exception())
		})
	}
}

func TestMOVNTI(t *testing.T) {
	t.Run("64-bit", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x48, 0x0f, 0xc3, 0x06) // movnti [rsi], rax
		e.c.regs.RSI, e.c.regs.RAX = kernData+0x10, 0x1122334455667788
		e.mustRun(KindMOVNTI)
		assert.Equal(t, uint64(0x1122334455667788), e.get64(dataGPA+0x10))
		assert.Equal(t, uint64(kernCode+4), e.c.regs.RIP)
	})
	t.Run("32-bit stores four bytes", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x0f, 0xc3, 0x5e, 0x08) // movnti [rsi+8], ebx
		e.put64(dataGPA+0x18, junk)
		e.c.regs.RSI, e.c.regs.RBX = kernData+0x10, 0x1122334455667788
		e.mustRun(KindMOVNTI)
		assert.Equal(t, uint64(0xdddddddd55667788), e.get64(dataGPA+0x18))
	})
	t.Run("register destination #UD", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x0f, 0xc3, 0xc0)
		e.mustRun(KindMOVNTI)
		assert.Equal(t, exUD, e.exception())
	})
}

func TestCMPXCHG16B(t *testing.T) {
	const code0, code1 = 0x0102030405060708, 0x1112131415161718
	setup := func(t *testing.T, addr uint64) *env {
		e := newEnv(t, 0)
		e.code(0xf0, 0x48, 0x0f, 0xc7, 0x0e) // lock cmpxchg16b [rsi]
		e.c.regs.RSI = addr
		e.put64(dataGPA+0x20, code0)
		e.put64(dataGPA+0x28, code1)
		e.c.regs.RBX, e.c.regs.RCX = 0xaaaa, 0xbbbb
		e.c.regs.RFLAGS = 2
		return e
	}
	t.Run("success stores RCX:RBX and sets ZF", func(t *testing.T) {
		e := setup(t, kernData+0x20)
		e.c.regs.RAX, e.c.regs.RDX = code0, code1
		e.mustRun(KindCMPXCHG16B)
		assert.Equal(t, uint64(0xaaaa), e.get64(dataGPA+0x20))
		assert.Equal(t, uint64(0xbbbb), e.get64(dataGPA+0x28))
		assert.Equal(t, uint64(2|flagZF), e.c.regs.RFLAGS)
		assert.Equal(t, uint64(code0), e.c.regs.RAX)
		assert.Equal(t, uint64(kernCode+5), e.c.regs.RIP)
	})
	t.Run("failure loads RDX:RAX and clears ZF", func(t *testing.T) {
		e := setup(t, kernData+0x20)
		e.c.regs.RAX, e.c.regs.RDX = code0, 0
		e.c.regs.RFLAGS = 2 | flagZF
		e.mustRun(KindCMPXCHG16B)
		assert.Equal(t, uint64(code0), e.get64(dataGPA+0x20), "memory unchanged")
		assert.Equal(t, uint64(code1), e.get64(dataGPA+0x28))
		assert.Equal(t, uint64(code0), e.c.regs.RAX)
		assert.Equal(t, uint64(code1), e.c.regs.RDX)
		assert.Equal(t, uint64(2), e.c.regs.RFLAGS)
		assert.Equal(t, uint64(kernCode+5), e.c.regs.RIP)
	})
	t.Run("misaligned #GP", func(t *testing.T) {
		e := setup(t, kernData+0x28)
		e.c.regs.RAX, e.c.regs.RDX = code1, 0
		e.mustRun(KindCMPXCHG16B)
		assert.Equal(t, exGP0, e.exception())
		assert.Equal(t, uint64(kernCode), e.c.regs.RIP)
		assert.Equal(t, uint64(code1), e.get64(dataGPA+0x28))
	})
	t.Run("read-only page faults even when the compare fails", func(t *testing.T) {
		e := setup(t, kernData+0x20)
		e.mapPage(kernData, dataGPA, pteP)
		e.c.regs.RAX, e.c.regs.RDX = 0, 0
		e.mustRun(KindCMPXCHG16B)
		assert.Equal(t, exPF(pfPresent|pfWrite), e.exception())
		assert.Equal(t, uint64(kernData+0x20), e.c.sregs.CR2)
		assert.Zero(t, e.c.regs.RAX, "RDX:RAX not loaded on a fault")
	})
}

func TestXGETBVXSETBV(t *testing.T) {
	t.Run("xgetbv reads XCR0", func(t *testing.T) {
		e := newEnv(t, 3)
		e.code(0x0f, 0x01, 0xd0)
		e.c.setXCR0(0x7)
		e.c.regs.RAX, e.c.regs.RDX, e.c.regs.RCX = junk, junk, 0xffffffff00000000
		e.mustRun(KindXGETBV)
		assert.Equal(t, uint64(7), e.c.regs.RAX)
		assert.Zero(t, e.c.regs.RDX)
		assert.Equal(t, uint64(userCode+3), e.c.regs.RIP)
	})
	t.Run("xgetbv of an unknown XCR #GP", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x0f, 0x01, 0xd0)
		e.c.regs.RCX = 1
		e.mustRun(KindXGETBV)
		assert.Equal(t, exGP0, e.exception())
	})
	t.Run("xgetbv without CR4.OSXSAVE #UD", func(t *testing.T) {
		e := newEnv(t, 0)
		e.c.sregs.CR4 &^= cr4OSXSAVE
		e.code(0x0f, 0x01, 0xd0)
		e.mustRun(KindXGETBV)
		assert.Equal(t, exUD, e.exception())
	})
	for _, tc := range []struct {
		name     string
		cpl      int
		rcx      uint64
		edx, eax uint64
		want     uint64 // XCR0 afterwards
		ex       *injected
	}{
		{"sets x87|SSE|AVX", 0, 0, 0, 0x7, 0x7, nil},
		{"sets the full layout", 0, 0, 0, 0xe7, 0xe7, nil},
		{"upper halves of RAX/RDX ignored", 0, 0, 0xffffffff00000000, 0xffffffff00000003, 0x3, nil},
		{"bit outside the layout mask (PKRU)", 0, 0, 0, 0x207, 0xe7, exGP0},
		{"bit in EDX outside the mask", 0, 0, 1, 0x7, 0xe7, exGP0},
		{"AVX without SSE, refused by KVM", 0, 0, 0, 0x5, 0xe7, exGP0},
		{"x87 cleared, refused by KVM", 0, 0, 0, 0x6, 0xe7, exGP0},
		{"XCR1", 0, 1, 0, 0x7, 0xe7, exGP0},
		{"user mode", 3, 0, 0, 0x7, 0xe7, exGP0},
	} {
		t.Run("xsetbv/"+tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cpl)
			e.code(0x0f, 0x01, 0xd1)
			e.c.regs.RCX, e.c.regs.RDX, e.c.regs.RAX = tc.rcx, tc.edx, tc.eax
			start := e.c.regs.RIP
			e.mustRun(KindXSETBV)
			assert.Equal(t, tc.want, e.c.xcr0())
			assert.Equal(t, tc.ex, e.exception())
			if tc.ex == nil {
				assert.Equal(t, start+3, e.c.regs.RIP)
			} else {
				assert.Equal(t, start, e.c.regs.RIP, "#GP is a fault: RIP stays")
			}
		})
	}
}

func TestFWAIT(t *testing.T) {
	t.Run("no pending exception", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x9b)
		e.c.fpu.FSW = 0x0001 // IE set but masked: ES clear
		e.mustRun(KindFWAIT)
		assert.Equal(t, uint64(kernCode+1), e.c.regs.RIP)
		assert.Nil(t, e.exception())
	})
	t.Run("pending unmasked exception #MF", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0x9b)
		e.c.fpu.FSW = 0x0081 // IE, ES
		e.mustRun(KindFWAIT)
		assert.Equal(t, uint64(kernCode), e.c.regs.RIP, "#MF is a fault")
		assert.Equal(t, &injected{Vector: vecMF}, e.exception())
	})
}

func TestUnhandled(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
	}{
		{"nop", []byte{0x90}},
		{"syscall", []byte{0x0f, 0x05}},
		{"bsf without F3 is not ours", []byte{0x0f, 0xbc, 0xc3}},
		{"unknown group 7", []byte{0x0f, 0x01, 0xc1}},
		{"only prefixes", []byte{0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			// fill the page with a byte that continues no instruction
			require.NoError(t, e.mem.WriteAt(make([]byte, 4096), codeGPA))
			e.code(tc.code...)
			before := *e.c
			k, err := e.run()
			var ue *UnhandledError
			require.ErrorAs(t, err, &ue)
			assert.Zero(t, k)
			assert.Equal(t, uint64(kernCode), ue.RIP)
			assert.Equal(t, 0, ue.CPL)
			require.Len(t, ue.Bytes, maxInsnLen)
			assert.Equal(t, tc.code, ue.Bytes[:len(tc.code)])
			assert.Contains(t, err.Error(), fmt.Sprintf("%#x", uint64(kernCode)))
			assert.Contains(t, err.Error(), hexBytes(tc.code))
			assert.Equal(t, before.regs, e.c.regs, "nothing changed")
			assert.Nil(t, e.exception())
			assert.Zero(t, e.a.Total())
		})
	}
}

func TestTruncatedAtUnmappedPage(t *testing.T) {
	// The instruction starts 2 bytes before the end of the code page and
	// the next page is not mapped: only the 2 readable bytes are known.
	e := newEnv(t, 0)
	e.c.regs.RIP = kernCode + 0xffe
	e.code(0xf3, 0x0f)
	_, err := e.run()
	var ue *UnhandledError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, uint64(kernCode+0xffe), ue.RIP)
	assert.Equal(t, []byte{0xf3, 0x0f}, ue.Bytes)
}

func TestTruncatedModRM(t *testing.T) {
	// popcnt with a SIB + disp32 cut off by the end of the mapped code
	e := newEnv(t, 0)
	e.c.regs.RIP = kernCode + 0xffa
	e.code(0xf3, 0x48, 0x0f, 0xb8, 0x04, 0x25)
	_, err := e.run()
	var ue *UnhandledError
	require.ErrorAs(t, err, &ue)
	assert.Len(t, ue.Bytes, 6)
	assert.Equal(t, uint64(kernCode+0xffa), e.c.regs.RIP)
}

// internalError builds the KVM_EXIT_INTERNAL_ERROR payload: data[0] flags,
// then the instruction length byte and the bytes.
func internalError(insn []byte) kvm.InternalError {
	raw := make([]byte, 24)
	raw[0] = byte(len(insn))
	copy(raw[1:], insn)
	return kvm.InternalError{Suberror: kvm.InternalErrorEmulation, Data: []uint64{
		1, binary.LittleEndian.Uint64(raw[0:]), binary.LittleEndian.Uint64(raw[8:]), binary.LittleEndian.Uint64(raw[16:]),
	}}
}

func TestFallbackToExitBytes(t *testing.T) {
	t.Run("code page unmapped", func(t *testing.T) {
		e := newEnv(t, 0)
		e.c.regs.RIP = 0xffffffff82000000 // nothing mapped here
		k, err := e.a.Complete(e.c, 0, internalError([]byte{0x0f, 0x01, 0xcb}))
		require.NoError(t, err)
		assert.Equal(t, KindSTAC, k)
		assert.Equal(t, uint64(0xffffffff82000003), e.c.regs.RIP)
		assert.NotZero(t, e.c.regs.RFLAGS&rflagsAC)
	})
	t.Run("page tables outside RAM", func(t *testing.T) {
		e := newEnv(t, 0)
		e.c.sregs.CR3 = 0x40000000
		k, err := e.a.Complete(e.c, 0, internalError([]byte{0xcc}))
		require.NoError(t, err)
		assert.Equal(t, KindInt3, k)
		assert.Equal(t, uint64(kernCode+1), e.c.regs.RIP)
	})
	t.Run("bogus length is clamped", func(t *testing.T) {
		e := newEnv(t, 0)
		e.c.regs.RIP = 0xffffffff82000000
		ie := internalError([]byte{0x90})
		ie.Data[1] |= 0xff // length byte 255
		_, err := e.a.Complete(e.c, 0, ie)
		var ue *UnhandledError
		require.ErrorAs(t, err, &ue)
		assert.LessOrEqual(t, len(ue.Bytes), maxInsnLen)
		assert.Equal(t, byte(0x90), ue.Bytes[0])
	})
	t.Run("no bytes anywhere", func(t *testing.T) {
		e := newEnv(t, 0)
		e.c.regs.RIP = 0xffffffff82000000
		_, err := e.a.Complete(e.c, 0, kvm.InternalError{Suberror: 1, Data: []uint64{0}})
		var ue *UnhandledError
		require.ErrorAs(t, err, &ue)
		assert.Empty(t, ue.Bytes)
	})
	t.Run("memory bytes win over exit bytes", func(t *testing.T) {
		e := newEnv(t, 0)
		e.code(0xcc)
		k, err := e.a.Complete(e.c, 0, internalError([]byte{0x0f, 0x0b}))
		require.NoError(t, err)
		assert.Equal(t, KindInt3, k)
	})
}

func TestVCPUErrorsPropagate(t *testing.T) {
	e := newEnv(t, 0)
	e.code(0xcc)
	boom := errors.New("KVM_GET_REGS: boom")
	e.c.failGet = boom
	_, err := e.run()
	require.ErrorIs(t, err, boom)
	assert.Zero(t, e.a.Total())
}

func TestCountsAndTrace(t *testing.T) {
	e := newEnv(t, 0)
	var traced []string
	e.a.Trace = func(vcpu int, k Kind, rip uint64, b []byte) {
		traced = append(traced, fmt.Sprintf("%d %v %#x % x", vcpu, k, rip, b))
	}
	e.code(0xcc)
	e.mustRun(KindInt3)
	e.code(0x0f, 0x01, 0xca)
	e.mustRun(KindCLAC)
	assert.Equal(t, map[string]uint64{"int3": 1, "clac": 1}, e.a.Counts())
	assert.Equal(t, uint64(2), e.a.Total())
	assert.Equal(t, []string{
		fmt.Sprintf("0 int3 %#x cc", uint64(kernCode+1)),
		fmt.Sprintf("0 clac %#x 0f 01 ca", uint64(kernCode+4)),
	}, traced)
	assert.Equal(t, "kind-99", Kind(99).String())
}
