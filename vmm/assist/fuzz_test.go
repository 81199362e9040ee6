package assist

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Bits of FuzzComplete's flags argument.
const (
	fzPointerRegs = 0xffff // bit i: GPR i points into the data pages
	fzRIPFromRegs = 1 << 16
	fzNoWP        = 1 << 17
	fzSMAP        = 1 << 18
	fzNoOSXSAVE   = 1 << 19
	fzFSGSBase    = 1 << 20
	fzLA57        = 1 << 21
	fzNoPaging    = 1 << 22
	fzUser        = 1 << 23
	fzNoMemCode   = 1 << 24 // code only in the exit's bytes
	fzNoOSFXSR    = 1 << 25
	fzTS          = 1 << 26
	fzEM          = 1 << 27
	fzXCR0Shift   = 32
)

// FuzzComplete feeds the assists hostile guests: random instruction bytes,
// register values, control bits and page-table contents (patched into real
// page tables). Whatever the guest does, Complete must return normally:
// no panic, no hang, and guest memory reached only through the bounds-
// checked memory package.
func FuzzComplete(f *testing.F) {
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: ramSize}})
	require.NoError(f, err)
	f.Cleanup(func() { mem.Close() })

	regs := make([]byte, 18*8)
	for i := range 16 {
		binary.LittleEndian.PutUint64(regs[8*i:], uint64(i)*0x48)
	}
	for _, code := range [][]byte{
		{0xcc}, {0x0f, 0x0b}, {0x0f, 0x01, 0xca}, {0x0f, 0x01, 0xcb}, {0x0f, 0x01, 0xf8}, {0x48, 0x0f, 0x07},
		{0x9b}, {0x0f, 0x01, 0xd0}, {0x0f, 0x01, 0xd1}, {0x48, 0x0f, 0xc7, 0xf0}, {0xf3, 0x0f, 0xc7, 0xf8},
		popcntLoad, movntiSt, xsave64, xsaveopt, xsavec, xrstor64,
		{0xf0, 0x48, 0x0f, 0xc7, 0x0e},
		{0xf3, 0x48, 0x0f, 0xb8, 0x44, 0xce, 0x10}, {0xf3, 0x48, 0x0f, 0xb8, 0x05, 0xf7, 0x01, 0x00, 0x00},
		{0x65, 0xf3, 0x48, 0x0f, 0xb8, 0x04, 0x25, 0x80, 0x00, 0x00, 0x00},
		{0xf3, 0x48, 0x0f, 0xae, 0xd3}, {0x0f, 0xae, 0x3e},
		ldmxcsr, stmxcsr, {0x0f, 0xae, 0x15, 0x20, 0x00, 0x00, 0x00}, {0x41, 0x0f, 0xae, 0x5c, 0x24, 0x08},
	} {
		f.Add(code, regs, []byte{}, uint64(0xe7)<<fzXCR0Shift|fzPointerRegs)
	}
	// a PML4 entry pointing outside RAM, then one pointing at itself
	f.Add(popcntLoad, regs, []byte{0x90, 0x0e, 0x03, 0x00, 0x00, 0x80, 0, 0, 0, 0}, uint64(fzPointerRegs))
	f.Add(xsave64, regs, []byte{0x90, 0x0e, 0x07, 0x00, 0x01, 0x00, 0, 0, 0, 0}, uint64(fzPointerRegs))
	// ldmxcsr with SSE disabled, with a lazy-FPU trap armed, and from user mode
	f.Add(ldmxcsr, regs, []byte{}, uint64(fzPointerRegs|fzNoOSFXSR))
	f.Add(ldmxcsr, regs, []byte{}, uint64(fzPointerRegs|fzTS))
	f.Add(stmxcsr, regs, []byte{}, uint64(fzPointerRegs|fzEM|fzUser))

	f.Fuzz(func(t *testing.T, code, regBytes, pt []byte, flags uint64) {
		clear(mem.Regions()[0].Data)
		cpl := 0
		if flags&fzUser != 0 {
			cpl = 3
		}
		e := newEnvMem(t, mem, cpl)
		e.mapPage(kernData+memory.PageSize, dataGPA+memory.PageSize, pteRW)
		e.mapPage(userData+memory.PageSize, dataGPA+memory.PageSize, pteRW|pteU)

		// registers: raw values, or pointers into the data pages
		var v [18]uint64
		b := make([]byte, len(v)*8)
		copy(b, regBytes)
		for i := range v {
			v[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		r := &e.c.regs
		gprs := []*uint64{&r.RAX, &r.RCX, &r.RDX, &r.RBX, &r.RSP, &r.RBP, &r.RSI, &r.RDI,
			&r.R8, &r.R9, &r.R10, &r.R11, &r.R12, &r.R13, &r.R14, &r.R15}
		for i, p := range gprs {
			*p = v[i]
			if flags>>i&1 != 0 {
				base := uint64(kernData)
				if cpl == 3 {
					base = userData
				}
				*p = base + v[i]&0x1fff
			}
		}
		r.RFLAGS = v[16]&0x3f7fd7 | 2
		if flags&fzRIPFromRegs != 0 {
			r.RIP = v[17]
		} else {
			r.RIP += v[17] & 0xfff
		}
		if len(regBytes) > len(b) {
			copy(e.c.xsave.Bytes(), regBytes[len(b):])
			e.c.fpu.FSW = uint16(regBytes[len(b)])
		}

		s := &e.c.sregs
		for _, c := range []struct {
			bit  uint64
			reg  *uint64
			mask uint64
			set  bool
		}{
			{fzNoWP, &s.CR0, cr0WP, false}, {fzNoPaging, &s.CR0, cr0PG, false},
			{fzSMAP, &s.CR4, cr4SMAP, true}, {fzNoOSXSAVE, &s.CR4, cr4OSXSAVE, false},
			{fzFSGSBase, &s.CR4, cr4FSGSBase, true}, {fzLA57, &s.CR4, cr4LA57, true},
			{fzNoOSFXSR, &s.CR4, cr4OSFXSR, false}, {fzTS, &s.CR0, cr0TS, true}, {fzEM, &s.CR0, cr0EM, true},
		} {
			if flags&c.bit != 0 {
				if c.set {
					*c.reg |= c.mask
				} else {
					*c.reg &^= c.mask
				}
			}
		}
		e.c.setXCR0(flags>>fzXCR0Shift&0xe7 | 1)

		// page-table patches: (offset into the table pages, value) records
		for ; len(pt) >= 10; pt = pt[10:] {
			off := uint64(binary.LittleEndian.Uint16(pt)) &^ 7 % (tablesEnd - tablesGPA)
			e.put64(tablesGPA+off, binary.LittleEndian.Uint64(pt[2:]))
		}

		code = code[:min(len(code), 2*maxInsnLen)]
		if flags&fzNoMemCode == 0 {
			gpa := uint64(codeGPA) + uint64(cpl/3)*memory.PageSize + r.RIP&0xfff
			n := min(uint64(len(code)), ramSize-gpa)
			require.NoError(t, e.mem.WriteAt(code[:n], gpa))
		}
		start, rcx := r.RIP, r.RCX
		ie := internalError(code[:min(len(code), maxInsnLen)])

		kind, err := e.a.Complete(e.c, 0, ie)

		var ue *UnhandledError
		switch {
		case errors.As(err, &ue):
			require.Equal(t, start, ue.RIP)
			require.LessOrEqual(t, len(ue.Bytes), maxInsnLen)
			require.Equal(t, start, e.c.regs.RIP, "an unhandled instruction changes nothing")
		case err != nil:
			require.Equal(t, start, e.c.regs.RIP, "a VMM error changes nothing")
		default:
			require.Less(t, kind, numKinds)
			require.LessOrEqual(t, e.c.setEvents, 1)
			ex := e.exception()
			switch {
			case kind == KindSYSRET && ex == nil:
				require.Equal(t, rcx, e.c.regs.RIP, "sysret jumps to RCX")
			case ex == nil || ex.Vector == vecBP:
				require.Greater(t, e.c.regs.RIP-start, uint64(0))
				require.LessOrEqual(t, e.c.regs.RIP-start, uint64(maxInsnLen))
			default:
				require.Equal(t, start, e.c.regs.RIP, "faults leave RIP at the instruction")
			}
		}
	})
}
