package assist

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

var (
	popcntLoad = []byte{0xf3, 0x48, 0x0f, 0xb8, 0x06} // popcnt rax, [rsi]
	movntiSt   = []byte{0x48, 0x0f, 0xc3, 0x06}       // movnti [rsi], rax
)

// faultCase runs one memory access and checks what hardware would do.
type faultCase struct {
	name  string
	cpl   int
	code  []byte
	setup func(e *env) uint64 // returns the operand's linear address
	ex    *injected           // nil: the access completes

	crossing bool // the fault is on the page after the operand's first byte
}

func runFaultCases(t *testing.T, cases []faultCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cpl)
			e.code(tc.code...)
			e.c.regs.RSI = tc.setup(e)
			e.c.regs.RAX = 0xff
			before := e.read(dataGPA, 2*memory.PageSize)
			start := e.c.regs.RIP
			e.mustRun(map[byte]Kind{0xb8: KindPOPCNT, 0xc3: KindMOVNTI}[tc.code[len(tc.code)-2]])
			if tc.ex == nil {
				assert.Nil(t, e.exception())
				assert.Equal(t, start+uint64(len(tc.code)), e.c.regs.RIP)
				return
			}
			assert.Equal(t, tc.ex, e.exception())
			assert.Equal(t, start, e.c.regs.RIP, "a fault leaves RIP at the instruction")
			assert.Equal(t, uint64(0xff), e.c.regs.RAX, "no register written")
			assert.Equal(t, before, e.read(dataGPA, 2*memory.PageSize), "memory untouched")
			if tc.ex.Vector == vecPF {
				cr2 := e.c.regs.RSI
				if tc.crossing {
					cr2 = cr2&^0xfff + memory.PageSize
				}
				assert.Equal(t, cr2, e.c.sregs.CR2, "CR2 is the first byte that faulted")
			} else {
				assert.Zero(t, e.c.sregs.CR2, "CR2 is only written for #PF")
			}
		})
	}
}

func TestPageFaults(t *testing.T) {
	runFaultCases(t, []faultCase{
		{"read not present", 0, popcntLoad, func(e *env) uint64 {
			return kernData + 5*memory.PageSize + 0x10
		}, exPF(0), false},
		{"user read not present", 3, popcntLoad, func(e *env) uint64 {
			return userData + 5*memory.PageSize
		}, exPF(pfUser), false},
		{"write not present", 0, movntiSt, func(e *env) uint64 {
			return kernData + 5*memory.PageSize
		}, exPF(pfWrite), false},
		{"PML4 entry not present", 0, popcntLoad, func(e *env) uint64 {
			return 0xffff900000000000
		}, exPF(0), false},
		{"write to read-only page, CR0.WP", 0, movntiSt, func(e *env) uint64 {
			e.mapPage(kernData, dataGPA, pteP)
			return kernData + 8
		}, exPF(pfPresent | pfWrite), false},
		{"write to read-only page, no CR0.WP: allowed at CPL0", 0, movntiSt, func(e *env) uint64 {
			e.mapPage(kernData, dataGPA, pteP)
			e.c.sregs.CR0 &^= cr0WP
			return kernData + 8
		}, nil, false},
		{"user write to read-only page faults whatever CR0.WP", 3, movntiSt, func(e *env) uint64 {
			e.mapPage(userData, dataGPA, pteP|pteU)
			e.c.sregs.CR0 &^= cr0WP
			return userData + 8
		}, exPF(pfPresent | pfWrite | pfUser), false},
		{"read-only upper level makes the page read-only", 0, movntiSt, func(e *env) uint64 {
			e.mapWith(0xffffa00000000000, dataGPA, pteRW, pteP)
			return 0xffffa00000000000
		}, exPF(pfPresent | pfWrite), false},
		{"user page through a supervisor-only PML4 entry", 3, popcntLoad, func(e *env) uint64 {
			e.mapWith(0x0000100000000000, dataGPA, pteRW|pteU, pteRW)
			return 0x0000100000000000 + 0x20
		}, exPF(pfPresent | pfUser), false},
		{"supervisor page from user mode", 3, popcntLoad, func(e *env) uint64 {
			return kernData
		}, exPF(pfPresent | pfUser), false},
		{"user page from user mode", 3, popcntLoad, func(e *env) uint64 {
			return userData
		}, nil, false},
		{"SMAP: user page from kernel mode with AC=0", 0, popcntLoad, func(e *env) uint64 {
			e.c.sregs.CR4 |= cr4SMAP
			return userData
		}, exPF(pfPresent), false},
		{"SMAP: user page written from kernel mode with AC=0", 0, movntiSt, func(e *env) uint64 {
			e.c.sregs.CR4 |= cr4SMAP
			return userData
		}, exPF(pfPresent | pfWrite), false},
		{"SMAP: AC=1 allows it", 0, popcntLoad, func(e *env) uint64 {
			e.c.sregs.CR4 |= cr4SMAP
			e.c.regs.RFLAGS |= rflagsAC
			return userData
		}, nil, false},
		{"no SMAP: kernel may read user pages", 0, popcntLoad, func(e *env) uint64 {
			return userData
		}, nil, false},
		{"non-canonical address #GP(0)", 0, popcntLoad, func(e *env) uint64 {
			return 0x0000800000000000
		}, exGP0, false},
		{"non-canonical write #GP(0)", 3, movntiSt, func(e *env) uint64 {
			return 0xfff0000000000000
		}, exGP0, false},
		{"store crossing into a not-present page", 0, movntiSt, func(e *env) uint64 {
			return kernData + memory.PageSize - 4
		}, exPF(pfWrite), true},
		{"store crossing into a read-only page", 0, movntiSt, func(e *env) uint64 {
			e.mapPage(kernData+memory.PageSize, dataGPA+memory.PageSize, pteP)
			return kernData + memory.PageSize - 4
		}, exPF(pfPresent | pfWrite), true},
		{"load crossing into a supervisor page from user mode", 3, popcntLoad, func(e *env) uint64 {
			e.mapPage(userData+memory.PageSize, dataGPA+memory.PageSize, pteRW)
			return userData + memory.PageSize - 2
		}, exPF(pfPresent | pfUser), true},
	})
}

func TestPageFaultCR2(t *testing.T) {
	e := newEnv(t, 0)
	e.code(movntiSt...)
	e.c.regs.RSI = kernData + memory.PageSize - 4
	e.put64(dataGPA+memory.PageSize-8, 0x0123456789abcdef)
	e.mustRun(KindMOVNTI)
	assert.Equal(t, exPF(pfWrite), e.exception())
	assert.Equal(t, uint64(kernData+memory.PageSize), e.c.sregs.CR2, "CR2 names the first byte that faulted")
	assert.Equal(t, uint64(0x0123456789abcdef), e.get64(dataGPA+memory.PageSize-8), "first page untouched")
}

func TestAccessedDirty(t *testing.T) {
	e := newEnv(t, 0)
	pte := e.pte(kernData)
	e.code(popcntLoad...)
	e.c.regs.RSI = kernData
	e.mustRun(KindPOPCNT)
	assert.Equal(t, uint64(pteAccessed), e.get64(pte)&(pteAccessed|pteDirty), "a read sets A only")

	e.setCPL(0)
	e.code(movntiSt...)
	e.mustRun(KindMOVNTI)
	assert.Equal(t, uint64(pteAccessed|pteDirty), e.get64(pte)&(pteAccessed|pteDirty), "a write sets D")
	assert.Equal(t, uint64(dataGPA|pteRW|pteAccessed|pteDirty), e.get64(pte), "address and permissions kept")
}

func TestLargePages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level int
		gva   uint64
	}{
		{"2 MiB", 2, 0xffffb00000000000},
		{"1 GiB", 3, 0xffffb80000000000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.mapAt(tc.level, tc.gva, 0, pteRW|pteLarge, pteRW)
			e.code(popcntLoad...)
			e.c.regs.RSI = tc.gva + dataGPA + 0x38 // offset inside the large page is the GPA
			e.put64(dataGPA+0x38, 0x7)
			e.mustRun(KindPOPCNT)
			assert.Nil(t, e.exception())
			assert.Equal(t, uint64(3), e.c.regs.RAX)
		})
	}
}

func TestTopOfAddressSpace(t *testing.T) {
	// A 4-byte read in the last page of the address space ends exactly at
	// 2^64. Page 0 is not mapped: nothing may walk (or fault) there.
	e := newEnv(t, 0)
	e.mapPage(0xfffffffffffff000, dataGPA, pteRW)
	e.code(0xf3, 0x0f, 0xb8, 0x06) // popcnt eax, [rsi]
	e.c.regs.RSI = 0xfffffffffffffffb
	require.NoError(t, e.mem.WriteAt([]byte{0x01, 0x03, 0x07, 0x0f, 0xff}, dataGPA+0xffb))
	e.mustRun(KindPOPCNT)
	assert.Nil(t, e.exception())
	assert.Equal(t, uint64(1+2+3+4), e.c.regs.RAX, "exactly the 4 bytes at the operand")
}

func TestPageTablesOutsideRAM(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(e *env) uint64
	}{
		{"PML4 entry points past RAM", func(e *env) uint64 {
			e.put64(tablesGPA+0x1d0*8, 0x80000000|pteRW) // PML4 slot of 0xffffe80000000000
			return 0xffffe80000000000
		}},
		{"page directory in the MMIO hole", func(e *env) uint64 {
			e.mapAt(3, 0xffffd00000000000, 0xfec00000, pteRW, pteRW) // a non-leaf PDPT entry (no PS)
			return 0xffffd00000000000
		}},
		{"leaf maps a page past RAM", func(e *env) uint64 {
			e.mapPage(kernData+3*memory.PageSize, 0x7fff0000, pteRW)
			return kernData + 3*memory.PageSize
		}},
		{"2 MiB page past the end of RAM", func(e *env) uint64 {
			e.mapAt(2, 0xffffb00000000000, ramSize, pteRW|pteLarge, pteRW)
			return 0xffffb00000000000 + 8
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			e.code(popcntLoad...)
			e.c.regs.RSI = tc.setup(e)
			e.c.regs.RAX = 0xff
			_, err := e.run()
			require.Error(t, err)
			assert.ErrorIs(t, err, memory.ErrOutOfRange)
			assert.Contains(t, err.Error(), "RIP 0xffffffff81000000", "the error names the instruction")
			assert.Nil(t, e.exception(), "nothing injected: the VM stops")
			assert.Equal(t, uint64(kernCode), e.c.regs.RIP)
			assert.Equal(t, uint64(0xff), e.c.regs.RAX)
		})
	}
}

func TestPagingDisabled(t *testing.T) {
	// Before CR0.PG linear addresses are physical.
	e := newEnv(t, 0)
	e.c.sregs.CR0 &^= cr0PG
	e.c.regs.RIP = codeGPA
	e.code(popcntLoad...)
	e.c.regs.RSI = dataGPA + 0x70
	e.put64(dataGPA+0x70, 0xf)
	e.mustRun(KindPOPCNT)
	assert.Equal(t, uint64(4), e.c.regs.RAX)
}
