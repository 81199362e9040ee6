// Package assist completes, in userspace, the few instructions a host's KVM
// instruction emulator rejects with KVM_EXIT_INTERNAL_ERROR (suberror
// EMULATION). On hosts that run guest kernel mode in KVM's emulator (nested
// without VT-x/SVM) Linux executes some of them while booting; on real
// hardware this path is never taken.
//
// Each assist does what the CPU would: it decodes the instruction at RIP,
// checks privilege and guest page permissions, updates registers and guest
// memory, advances RIP or injects the exception hardware would raise, and
// is counted. An instruction it doesn't know is returned as an
// *UnhandledError naming RIP and the bytes, and the VM stops.
package assist

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

// VCPU is the vCPU state an assist reads and writes; *kvm.VCPU implements it.
type VCPU interface {
	GetRegs() (*kvm.Regs, error)
	SetRegs(*kvm.Regs) error
	GetSregs() (*kvm.Sregs, error)
	SetSregs(*kvm.Sregs) error
	GetVCPUEvents() (*kvm.VCPUEvents, error)
	SetVCPUEvents(*kvm.VCPUEvents) error
	GetFPU() (*kvm.FPU, error)
	GetXSave() (*kvm.XSave, error)
	SetXSave(*kvm.XSave) error
	GetXCRs() (*kvm.XCRs, error)
	SetXCRs(*kvm.XCRs) error
	GetMSR(uint32) (uint64, error)
	SetMSR(uint32, uint64) error
}

// Kind names an assisted instruction (family).
type Kind int

// The assisted instructions.
const (
	KindInt3 Kind = iota
	KindUD
	KindCLAC
	KindSTAC
	KindPOPCNT
	KindLZCNT
	KindTZCNT
	KindCMPXCHG16B
	KindRDRAND
	KindRDSEED
	KindRDPID
	KindRDFSBASE
	KindRDGSBASE
	KindWRFSBASE
	KindWRGSBASE
	KindSWAPGS
	KindSYSRET
	KindFence
	KindPrefetch
	KindCLFLUSH
	KindMOVNTI
	KindXGETBV
	KindXSETBV
	KindFWAIT
	KindXSAVE
	KindXSAVEC
	KindXRSTOR
	KindLDMXCSR
	KindSTMXCSR
	numKinds
)

var kindNames = [numKinds]string{
	"int3", "ud", "clac", "stac", "popcnt", "lzcnt", "tzcnt", "cmpxchg16b", "rdrand", "rdseed", "rdpid",
	"rdfsbase", "rdgsbase", "wrfsbase", "wrgsbase", "swapgs", "sysret", "fence", "prefetch", "clflush",
	"movnti", "xgetbv", "xsetbv", "fwait", "xsave", "xsavec", "xrstor", "ldmxcsr", "stmxcsr",
}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind-%d", int(k))
}

// Exception vectors the assists inject.
const (
	vecBP = 3
	vecUD = 6
	vecNM = 7
	vecGP = 13
	vecPF = 14
	vecMF = 16
)

type exception struct {
	vector  uint8
	code    uint32
	hasCode bool
	cr2     uint64 // for #PF
}

func gp0() *exception { return &exception{vector: vecGP, hasCode: true} }
func ud() *exception  { return &exception{vector: vecUD} }

// UnhandledError is an emulation failure no assist completes.
type UnhandledError struct {
	RIP   uint64
	Bytes []byte
	CPL   int
}

func (e *UnhandledError) Error() string {
	return fmt.Sprintf("instruction the host's KVM can't emulate and no assist completes: RIP %#x CPL %d bytes [%s]",
		e.RIP, e.CPL, hexBytes(e.Bytes))
}

// Assister completes instructions for all vCPUs of one VM.
type Assister struct {
	mem    *memory.Guest
	xs     x86.XSaveLayout
	counts [numKinds]atomic.Uint64
	// Trace, if set, sees every completed instruction.
	Trace func(vcpu int, k Kind, rip uint64, b []byte)
}

// New returns an Assister for a VM's memory and XSAVE layout.
func New(mem *memory.Guest, xs x86.XSaveLayout) *Assister {
	return &Assister{mem: mem, xs: xs}
}

// Counts returns how often each kind was completed (non-zero only).
func (a *Assister) Counts() map[string]uint64 {
	m := map[string]uint64{}
	for k := Kind(0); k < numKinds; k++ {
		if n := a.counts[k].Load(); n > 0 {
			m[k.String()] = n
		}
	}
	return m
}

// Total is the number of completed instructions.
func (a *Assister) Total() uint64 {
	var n uint64
	for k := range a.counts {
		n += a.counts[k].Load()
	}
	return n
}

// exec is one assist in progress.
type exec struct {
	a     *Assister
	c     VCPU
	r     *kvm.Regs
	s     *kvm.Sregs
	in    insn
	cpl   int
	sregs bool // sregs changed
}

func (x *exec) mode() mode { return mode{s: x.s, rflags: x.r.RFLAGS, user: x.cpl == 3} }

// Complete completes the instruction at the vCPU's RIP after an emulation
// failure. ie is the exit's internal-error payload, whose instruction bytes
// are used when the code page can't be read.
func (a *Assister) Complete(c VCPU, id int, ie kvm.InternalError) (Kind, error) {
	r, err := c.GetRegs()
	if err != nil {
		return 0, fmt.Errorf("assist vCPU %d: %w", id, err)
	}
	s, err := c.GetSregs()
	if err != nil {
		return 0, fmt.Errorf("assist vCPU %d: %w", id, err)
	}
	x := &exec{a: a, c: c, r: r, s: s, cpl: int(s.CS.Selector & 3)}
	x.in.b = a.fetch(x, ie)
	kind, ex, advance, err := x.dispatch()
	if err != nil {
		return 0, fmt.Errorf("assist vCPU %d at RIP %#x [%s]: %w", id, r.RIP, hexBytes(x.in.decoded()), err)
	}
	if kind < 0 {
		return 0, &UnhandledError{RIP: r.RIP, Bytes: x.in.b, CPL: x.cpl}
	}
	if advance {
		r.RIP += uint64(x.in.len)
	}
	if ex != nil && ex.vector == vecPF {
		s.CR2 = ex.cr2
		x.sregs = true
	}
	if x.sregs {
		if err := c.SetSregs(s); err != nil {
			return kind, fmt.Errorf("assist vCPU %d: complete %v: %w", id, kind, err)
		}
	}
	if err := c.SetRegs(r); err != nil {
		return kind, fmt.Errorf("assist vCPU %d: complete %v: %w", id, kind, err)
	}
	if ex != nil {
		if err := inject(c, ex); err != nil {
			return kind, fmt.Errorf("assist vCPU %d: inject vector %d for %v: %w", id, ex.vector, kind, err)
		}
	}
	a.counts[kind].Add(1)
	if a.Trace != nil {
		a.Trace(id, kind, r.RIP, x.in.decoded())
	}
	return kind, nil
}

// fetch reads up to 15 instruction bytes at RIP, stopping at the first
// unreadable page; if none can be read it falls back to the bytes KVM put
// in the exit (data[1] low byte = length, bytes follow).
func (a *Assister) fetch(x *exec, ie kvm.InternalError) []byte {
	m := x.mode()
	var b []byte
	for rip := x.r.RIP; len(b) < maxInsnLen; {
		gpa, ex, err := translate(a.mem, m, rip, false)
		if ex != nil || err != nil {
			break
		}
		n := min(uint64(maxInsnLen-len(b)), 0x1000-rip&0xfff)
		h, err := a.mem.Slice(gpa, n)
		if err != nil {
			break
		}
		b = append(b, h...)
		rip += n
	}
	if len(b) > 0 || len(ie.Data) < 2 {
		return b
	}
	raw := make([]byte, 0, 8*(len(ie.Data)-1))
	for _, d := range ie.Data[1:] {
		raw = binary.LittleEndian.AppendUint64(raw, d)
	}
	n := int(raw[0])
	if n > maxInsnLen || n > len(raw)-1 {
		n = min(maxInsnLen, len(raw)-1)
	}
	return raw[1 : 1+n]
}

func inject(c VCPU, ex *exception) error {
	ev, err := c.GetVCPUEvents()
	if err != nil {
		return err
	}
	ev.Exception.Injected = 1
	ev.Exception.Pending = 0
	ev.Exception.Nr = ex.vector
	ev.Exception.HasErrorCode = 0
	if ex.hasCode {
		ev.Exception.HasErrorCode = 1
	}
	ev.Exception.ErrorCode = ex.code
	ev.Flags = 0 // leave NMI, SIPI, shadow and SMM state as they are
	return c.SetVCPUEvents(ev)
}

// Flag bits of RFLAGS the arithmetic assists define.
const (
	flagCF    = 1 << 0
	flagPF    = 1 << 2
	flagAF    = 1 << 4
	flagZF    = 1 << 6
	flagSF    = 1 << 7
	flagOF    = 1 << 11
	flagArith = flagCF | flagPF | flagAF | flagZF | flagSF | flagOF
)

// dispatch decodes and performs the instruction. kind < 0: not ours.
func (x *exec) dispatch() (kind Kind, ex *exception, advance bool, err error) {
	in := &x.in
	if err := in.prefixes(); err != nil {
		return -1, nil, false, nil
	}
	op, err := in.next()
	if err != nil {
		return -1, nil, false, nil
	}
	switch op {
	case 0xcc: // int3: a trap, so #BP is delivered with RIP after the instruction
		in.finish()
		return KindInt3, &exception{vector: vecBP}, true, nil
	case 0x9b: // fwait: #MF if an unmasked x87 exception is pending
		in.finish()
		f, err := x.c.GetFPU()
		if err != nil {
			return 0, nil, false, err
		}
		if f.FSW&0x80 != 0 {
			return KindFWAIT, &exception{vector: vecMF}, false, nil
		}
		return KindFWAIT, nil, true, nil
	case 0x0f:
	default:
		return -1, nil, false, nil
	}
	op2, err := in.next()
	if err != nil {
		return -1, nil, false, nil
	}
	k, ex, adv, err := x.twoByte(op2)
	if err == errTruncated {
		return -1, nil, false, nil
	}
	return k, ex, adv, err
}

func (x *exec) twoByte(op2 byte) (Kind, *exception, bool, error) {
	in := &x.in
	switch op2 {
	case 0x0b, 0xb9, 0xff: // ud2, ud1, ud0: BUG()/WARN() traps, #UD at the same RIP
		in.finish()
		return KindUD, ud(), false, nil
	case 0x01:
		return x.group7()
	case 0x07: // sysret
		return x.sysret()
	case 0x18, 0x0d: // prefetch hints
		if err := in.modrm(x.r, x.s, 0); err != nil {
			return 0, nil, false, err
		}
		return KindPrefetch, nil, true, nil
	case 0xae:
		return x.group15()
	case 0xc3: // movnti m, r
		if err := in.modrm(x.r, x.s, 0); err != nil {
			return 0, nil, false, err
		}
		if in.rmIsReg {
			return KindMOVNTI, ud(), false, nil
		}
		sz := 4
		if in.rexW {
			sz = 8
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], *reg(x.r, in.reg))
		return x.store(KindMOVNTI, in.ea, b[:sz])
	case 0xb8, 0xbc, 0xbd: // popcnt / tzcnt / lzcnt (F3 prefix; without it jmpe / bsf / bsr)
		if !in.rep {
			return -1, nil, false, nil
		}
		return x.bitCount(op2)
	case 0xc7:
		return x.group9()
	}
	return -1, nil, false, nil
}

func (x *exec) group7() (Kind, *exception, bool, error) {
	in := &x.in
	m, err := in.next()
	if err != nil {
		return 0, nil, false, err
	}
	in.finish()
	switch m {
	case 0xca, 0xcb: // clac, stac
		k := KindCLAC
		if m == 0xcb {
			k = KindSTAC
		}
		if x.cpl != 0 {
			return k, ud(), false, nil
		}
		if m == 0xca {
			x.r.RFLAGS &^= rflagsAC
		} else {
			x.r.RFLAGS |= rflagsAC
		}
		return k, nil, true, nil
	case 0xf8: // swapgs
		if x.cpl != 0 {
			return KindSWAPGS, gp0(), false, nil
		}
		kgs, err := x.c.GetMSR(x86.MSRKernelGSBase)
		if err != nil {
			return 0, nil, false, err
		}
		if err := x.c.SetMSR(x86.MSRKernelGSBase, x.s.GS.Base); err != nil {
			return 0, nil, false, err
		}
		x.s.GS.Base = kgs
		x.sregs = true
		return KindSWAPGS, nil, true, nil
	case 0xd0: // xgetbv
		if x.s.CR4&cr4OSXSAVE == 0 {
			return KindXGETBV, ud(), false, nil
		}
		if uint32(x.r.RCX) != 0 {
			return KindXGETBV, gp0(), false, nil
		}
		xcr0, err := getXCR0(x.c)
		if err != nil {
			return 0, nil, false, err
		}
		x.r.RAX, x.r.RDX = uint64(uint32(xcr0)), xcr0>>32
		return KindXGETBV, nil, true, nil
	case 0xd1: // xsetbv
		if x.s.CR4&cr4OSXSAVE == 0 {
			return KindXSETBV, ud(), false, nil
		}
		if x.cpl != 0 || uint32(x.r.RCX) != 0 {
			return KindXSETBV, gp0(), false, nil
		}
		v := uint64(uint32(x.r.RAX)) | uint64(uint32(x.r.RDX))<<32
		if v&^x.a.xs.Mask != 0 {
			return KindXSETBV, gp0(), false, nil
		}
		xc := &kvm.XCRs{NrXCRs: 1}
		xc.XCRs[0] = kvm.XCR{XCR: 0, Value: v}
		if err := x.c.SetXCRs(xc); err != nil {
			// KVM refuses what hardware would refuse (e.g. AVX without SSE)
			return KindXSETBV, gp0(), false, nil
		}
		return KindXSETBV, nil, true, nil
	}
	return -1, nil, false, nil
}

func (x *exec) sysret() (Kind, *exception, bool, error) {
	in := &x.in
	in.finish()
	if !in.rexW {
		return -1, nil, false, nil // return to compatibility mode: no 32-bit user space here
	}
	if x.cpl != 0 {
		return KindSYSRET, gp0(), false, nil
	}
	if t := int64(x.r.RCX) >> 47; t != 0 && t != -1 {
		return KindSYSRET, gp0(), false, nil
	}
	star, err := x.c.GetMSR(x86.MSRSTAR)
	if err != nil {
		return 0, nil, false, err
	}
	base := uint16(star >> 48)
	x.r.RIP = x.r.RCX
	x.r.RFLAGS = x.r.R11&0x3c7fd7 | 2
	x.s.CS = kvm.Segment{Selector: (base + 16) | 3, Limit: 0xffffffff, Type: 11, S: 1, DPL: 3, Present: 1, L: 1, G: 1}
	x.s.SS = kvm.Segment{Selector: (base + 8) | 3, Limit: 0xffffffff, Type: 3, S: 1, DPL: 3, Present: 1, DB: 1, G: 1}
	x.sregs = true
	return KindSYSRET, nil, false, nil
}

func (x *exec) group15() (Kind, *exception, bool, error) {
	in := &x.in
	m, err := in.peek()
	if err != nil {
		return 0, nil, false, err
	}
	regField := int(m >> 3 & 7)
	if m>>6 == 3 {
		if err := in.modrm(x.r, x.s, 0); err != nil {
			return 0, nil, false, err
		}
		if !in.rep && regField >= 5 { // lfence, mfence, sfence
			return KindFence, nil, true, nil
		}
		if in.rep && regField <= 3 { // rd/wr fs/gs base
			kinds := [4]Kind{KindRDFSBASE, KindRDGSBASE, KindWRFSBASE, KindWRGSBASE}
			k := kinds[regField]
			if x.s.CR4&cr4FSGSBase == 0 {
				return k, ud(), false, nil
			}
			sz := 4
			if in.rexW {
				sz = 8
			}
			switch regField {
			case 0:
				writeReg(x.r, in.rm, sz, x.s.FS.Base)
			case 1:
				writeReg(x.r, in.rm, sz, x.s.GS.Base)
			case 2, 3:
				v := truncate(*reg(x.r, in.rm), sz)
				if t := int64(v) >> 47; t != 0 && t != -1 {
					return k, gp0(), false, nil
				}
				if regField == 2 {
					x.s.FS.Base = v
				} else {
					x.s.GS.Base = v
				}
				x.sregs = true
			}
			return k, nil, true, nil
		}
		return -1, nil, false, nil
	}
	if err := in.modrm(x.r, x.s, 0); err != nil {
		return 0, nil, false, err
	}
	switch {
	case !in.opsz && !in.rep && !in.repne && (regField == 2 || regField == 3):
		return x.mxcsr(regField == 2)
	case !in.opsz && !in.rep && !in.repne && (regField == 4 || regField == 5 || regField == 6):
		restore := regField == 5
		k := KindXSAVE
		if restore {
			k = KindXRSTOR
		}
		ex, err := x.xsave(in.ea, restore, false)
		return k, ex, ex == nil, err
	case regField == 7 || (in.opsz && regField == 6): // clflush, clflushopt, clwb: RAM is coherent
		return KindCLFLUSH, nil, true, nil
	}
	return -1, nil, false, nil
}

func (x *exec) group9() (Kind, *exception, bool, error) {
	in := &x.in
	m, err := in.peek()
	if err != nil {
		return 0, nil, false, err
	}
	regField := int(m >> 3 & 7)
	if err := in.modrm(x.r, x.s, 0); err != nil {
		return 0, nil, false, err
	}
	if in.rmIsReg {
		switch {
		case regField == 7 && in.rep: // rdpid
			aux, err := x.c.GetMSR(x86.MSRTSCAux)
			if err != nil {
				return 0, nil, false, err
			}
			*reg(x.r, in.rm) = uint64(uint32(aux))
			return KindRDPID, nil, true, nil
		case regField == 6 || regField == 7: // rdrand, rdseed
			k := KindRDRAND
			if regField == 7 {
				k = KindRDSEED
			}
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				// hardware reports "no entropy now" with CF=0
				x.r.RFLAGS &^= flagArith
				writeReg(x.r, in.rm, in.opSize(), 0)
				return k, nil, true, nil
			}
			writeReg(x.r, in.rm, in.opSize(), binary.LittleEndian.Uint64(b[:]))
			x.r.RFLAGS = x.r.RFLAGS&^flagArith | flagCF
			return k, nil, true, nil
		}
		return -1, nil, false, nil
	}
	switch {
	case regField == 4 && !in.opsz && !in.rep: // xsavec
		ex, err := x.xsave(in.ea, false, true)
		return KindXSAVEC, ex, ex == nil, err
	case regField == 1 && in.rexW: // cmpxchg16b
		return x.cmpxchg16b()
	}
	return -1, nil, false, nil
}

func (x *exec) bitCount(op2 byte) (Kind, *exception, bool, error) {
	in := &x.in
	if err := in.modrm(x.r, x.s, 0); err != nil {
		return 0, nil, false, err
	}
	k := map[byte]Kind{0xb8: KindPOPCNT, 0xbc: KindTZCNT, 0xbd: KindLZCNT}[op2]
	sz := in.opSize()
	var v uint64
	if in.rmIsReg {
		v = truncate(*reg(x.r, in.rm), sz)
	} else {
		b := make([]byte, 8)
		ex, err := x.load(in.ea, b[:sz])
		if ex != nil || err != nil {
			return k, ex, false, err
		}
		v = binary.LittleEndian.Uint64(b)
	}
	width := sz * 8
	var res uint64
	fl := x.r.RFLAGS &^ flagArith
	switch op2 {
	case 0xb8:
		res = uint64(bits.OnesCount64(v))
		if v == 0 {
			fl |= flagZF
		}
	case 0xbc:
		res = uint64(width)
		if v != 0 {
			res = uint64(bits.TrailingZeros64(v))
		} else {
			fl |= flagCF
		}
		if res == 0 {
			fl |= flagZF
		}
	case 0xbd:
		res = uint64(width)
		if v != 0 {
			res = uint64(bits.LeadingZeros64(v) - (64 - width))
		} else {
			fl |= flagCF
		}
		if res == 0 {
			fl |= flagZF
		}
	}
	x.r.RFLAGS = fl
	writeReg(x.r, in.reg, sz, res)
	return k, nil, true, nil
}

func (x *exec) cmpxchg16b() (Kind, *exception, bool, error) {
	ea := x.in.ea
	if ea&15 != 0 {
		return KindCMPXCHG16B, gp0(), false, nil
	}
	// a locked read-modify-write needs write permission even if it fails
	ex, err := checkRange(x.a.mem, x.mode(), ea, 16, true)
	if ex != nil || err != nil {
		return KindCMPXCHG16B, ex, false, err
	}
	gpa, ex, err := translate(x.a.mem, x.mode(), ea, true)
	if ex != nil || err != nil {
		return KindCMPXCHG16B, ex, false, err
	}
	h, err := x.a.mem.SliceForWrite(gpa, 16)
	if err != nil {
		return 0, nil, false, err
	}
	// The host's own CMPXCHG16B on the shared mapping keeps the operation
	// atomic against other vCPUs running concurrently.
	ok, cur0, cur1 := cas128(&h[0], x.r.RAX, x.r.RDX, x.r.RBX, x.r.RCX)
	if ok {
		x.r.RFLAGS |= flagZF
	} else {
		x.r.RFLAGS &^= flagZF
		x.r.RAX, x.r.RDX = cur0, cur1
	}
	return KindCMPXCHG16B, nil, true, nil
}

// load reads guest linear memory for the instruction, faulting like hardware.
func (x *exec) load(gva uint64, b []byte) (*exception, error) {
	ex, err := checkRange(x.a.mem, x.mode(), gva, uint64(len(b)), false)
	if ex != nil || err != nil {
		return ex, err
	}
	return nil, access(x.a.mem, x.mode(), gva, b, false)
}

// store writes guest linear memory for the instruction of kind k.
func (x *exec) store(k Kind, gva uint64, b []byte) (Kind, *exception, bool, error) {
	ex, err := checkRange(x.a.mem, x.mode(), gva, uint64(len(b)), true)
	if ex != nil || err != nil {
		return k, ex, false, err
	}
	return k, nil, true, access(x.a.mem, x.mode(), gva, b, true)
}

func getXCR0(c VCPU) (uint64, error) {
	xc, err := c.GetXCRs()
	if err != nil {
		return 0, err
	}
	for i := 0; i < int(xc.NrXCRs) && i < len(xc.XCRs); i++ {
		if xc.XCRs[i].XCR == 0 {
			return xc.XCRs[i].Value, nil
		}
	}
	return 1, nil // x87 only: the reset value
}
