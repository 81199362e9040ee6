package assist

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

// fakeVCPU holds the vCPU state KVM would hold, in memory, so the assists
// can be driven without /dev/kvm. Getters return copies, as the ioctls do,
// so a test sees only what an assist explicitly wrote back.
type fakeVCPU struct {
	regs   kvm.Regs
	sregs  kvm.Sregs
	events kvm.VCPUEvents
	fpu    kvm.FPU
	xsave  kvm.XSave
	xcrs   kvm.XCRs
	msrs   map[uint32]uint64

	setEvents int   // KVM_SET_VCPU_EVENTS calls: one per injected exception
	failGet   error // returned by GetRegs, to drive the error paths
}

var _ VCPU = (*fakeVCPU)(nil)

func (f *fakeVCPU) GetRegs() (*kvm.Regs, error) {
	if f.failGet != nil {
		return nil, f.failGet
	}
	r := f.regs
	return &r, nil
}
func (f *fakeVCPU) SetRegs(r *kvm.Regs) error { f.regs = *r; return nil }
func (f *fakeVCPU) GetSregs() (*kvm.Sregs, error) {
	s := f.sregs
	return &s, nil
}
func (f *fakeVCPU) SetSregs(s *kvm.Sregs) error { f.sregs = *s; return nil }
func (f *fakeVCPU) GetVCPUEvents() (*kvm.VCPUEvents, error) {
	e := f.events
	return &e, nil
}
func (f *fakeVCPU) SetVCPUEvents(e *kvm.VCPUEvents) error {
	f.events = *e
	f.setEvents++
	return nil
}
func (f *fakeVCPU) GetFPU() (*kvm.FPU, error) {
	p := f.fpu
	return &p, nil
}
func (f *fakeVCPU) GetXSave() (*kvm.XSave, error) {
	x := f.xsave
	return &x, nil
}
func (f *fakeVCPU) SetXSave(x *kvm.XSave) error { f.xsave = *x; return nil }
func (f *fakeVCPU) GetXCRs() (*kvm.XCRs, error) {
	x := f.xcrs
	return &x, nil
}

// SetXCRs refuses what KVM's __kvm_set_xcr refuses, so the assist's
// "KVM said no, inject #GP" path is exercised.
func (f *fakeVCPU) SetXCRs(x *kvm.XCRs) error {
	for i := 0; i < int(x.NrXCRs); i++ {
		if x.XCRs[i].XCR != 0 {
			return errors.New("KVM_SET_XCRS: only XCR0 exists")
		}
		v := x.XCRs[i].Value
		if v&1 == 0 || v&4 != 0 && v&2 == 0 || v&0xe0 != 0 && v&0xe4 != 0xe4 {
			return errors.New("KVM_SET_XCRS: invalid XCR0")
		}
	}
	f.xcrs = *x
	return nil
}
func (f *fakeVCPU) GetMSR(i uint32) (uint64, error) {
	v, ok := f.msrs[i]
	if !ok {
		return 0, errors.New("KVM_GET_MSRS: MSR not readable")
	}
	return v, nil
}
func (f *fakeVCPU) SetMSR(i uint32, v uint64) error { f.msrs[i] = v; return nil }

func (f *fakeVCPU) xcr0() uint64 {
	v, _ := getXCR0(f) // the fake's GetXCRs never fails
	return v
}

func (f *fakeVCPU) setXCR0(v uint64) {
	f.xcrs = kvm.XCRs{NrXCRs: 1}
	f.xcrs.XCRs[0] = kvm.XCR{XCR: 0, Value: v}
}

// Guest layout of the test machine: 2 MiB of RAM, page tables allocated
// from tablesGPA upward, one code page for each privilege level.
const (
	ramSize   = 2 << 20
	tablesGPA = 0x10000
	tablesEnd = 0x40000
	codeGPA   = 0x100000 // kernel code page; user code page follows
	dataGPA   = 0x110000 // data pages the tests map as they need

	kernCode = 0xffffffff81000000
	userCode = 0x0000000000400000
	kernData = 0xffffc90000000000 // supervisor data, maps dataGPA
	userData = 0x00007f0000000000 // user data, maps dataGPA

	pteP  = ptePresent
	pteW  = pteWritable
	pteU  = pteUser
	pteRW = pteP | pteW

	selKernCS = 0x10
	selUserCS = 0x33
	eferLME   = 1 << 8
	eferLMA   = 1 << 10
	eferSCE   = 1 << 0
	cr0PE     = 1 << 0
	cr0NE     = 1 << 5
	cr4PAE    = 1 << 5
)

// The XSAVE layout of a host whose XCR0 is 0xe7 (Intel's standard offsets).
var testLayout = func() x86.XSaveLayout {
	var l x86.XSaveLayout
	l.Mask = 0xe7
	for _, c := range []struct{ i, size, off uint32 }{{2, 256, 576}, {5, 64, 1088}, {6, 512, 1152}, {7, 1024, 1664}} {
		l.Size[c.i], l.Offset[c.i] = c.size, c.off
	}
	return l
}()

type env struct {
	t    testing.TB
	mem  *memory.Guest
	a    *Assister
	c    *fakeVCPU
	next uint64 // next free page-table page
}

// newEnv builds a 64-bit guest at CPL cpl with real 4-level page tables
// mapping the code pages and one data page at kernData (supervisor,
// writable) and userData (user, writable).
func newEnv(t testing.TB, cpl int) *env {
	t.Helper()
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: ramSize}})
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	return newEnvMem(t, mem, cpl)
}

// newEnvMem is newEnv on existing (zeroed) guest RAM of ramSize bytes.
func newEnvMem(t testing.TB, mem *memory.Guest, cpl int) *env {
	t.Helper()
	e := &env{t: t, mem: mem, a: New(mem, testLayout), c: &fakeVCPU{msrs: map[uint32]uint64{}}, next: tablesGPA + memory.PageSize}
	s := &e.c.sregs
	s.CR0 = cr0PE | cr0NE | cr0WP | cr0PG
	s.CR3 = tablesGPA
	s.CR4 = cr4PAE | cr4OSFXSR | cr4OSXSAVE
	s.EFER = eferLME | eferLMA | eferSCE
	e.setCPL(cpl)
	e.c.regs.RFLAGS = 2
	e.c.fpu.FCW = 0x37f
	e.c.setXCR0(0xe7)
	binary.LittleEndian.PutUint32(e.c.xsave.Bytes()[xsMXCSR:], 0x1f80)
	binary.LittleEndian.PutUint32(e.c.xsave.Bytes()[xsMXCSRMask:], 0xffff)

	e.mapPage(kernCode, codeGPA, pteP)
	e.mapPage(userCode, codeGPA+0x1000, pteP|pteU)
	e.mapPage(kernData, dataGPA, pteRW)
	e.mapPage(userData, dataGPA, pteRW|pteU)
	return e
}

// setCPL switches CS (and RIP to that level's code page).
func (e *env) setCPL(cpl int) {
	s := &e.c.sregs
	if cpl == 3 {
		s.CS = kvm.Segment{Selector: selUserCS, DPL: 3, Type: 11, S: 1, L: 1, Present: 1}
		e.c.regs.RIP = userCode
	} else {
		s.CS = kvm.Segment{Selector: selKernCS, Type: 11, S: 1, L: 1, Present: 1}
		e.c.regs.RIP = kernCode
	}
}

// mapPage maps the 4 KiB page at gva to gpa with leaf flags; the upper
// levels are created present, writable and user so the leaf decides.
func (e *env) mapPage(gva, gpa, flags uint64) {
	e.mapWith(gva, gpa, flags, pteRW|pteU)
}

// mapWith maps gva to gpa creating missing upper-level entries with upper.
// It returns the guest-physical address of the leaf PTE.
func (e *env) mapWith(gva, gpa, flags, upper uint64) uint64 {
	return e.mapAt(1, gva, gpa, flags, upper)
}

// mapAt maps gva with a leaf at level (1: 4 KiB, 2: 2 MiB, 3: 1 GiB; the
// caller adds pteLarge for levels above 1).
func (e *env) mapAt(level int, gva, gpa, flags, upper uint64) uint64 {
	e.t.Helper()
	table := uint64(tablesGPA)
	for lvl := 4; lvl > level; lvl-- {
		slot := table + (gva>>(12+9*(lvl-1))&0x1ff)*8
		ent, err := e.mem.Uint64(slot)
		require.NoError(e.t, err)
		if ent&pteP == 0 {
			require.Less(e.t, e.next, uint64(tablesEnd), "test page-table pool exhausted")
			ent = e.next | upper
			e.next += memory.PageSize
			require.NoError(e.t, e.mem.PutUint64(slot, ent))
		}
		table = ent & pteAddrMask
	}
	slot := table + (gva>>(12+9*(level-1))&0x1ff)*8
	require.NoError(e.t, e.mem.PutUint64(slot, gpa|flags))
	return slot
}

// pte returns the guest-physical address of the leaf entry for gva.
func (e *env) pte(gva uint64) uint64 {
	e.t.Helper()
	table := uint64(tablesGPA)
	for lvl := 4; lvl > 1; lvl-- {
		ent, err := e.mem.Uint64(table + (gva>>(12+9*(lvl-1))&0x1ff)*8)
		require.NoError(e.t, err)
		table = ent & pteAddrMask
	}
	return table + (gva>>12&0x1ff)*8
}

// code writes instruction bytes at the current RIP (on its code page).
func (e *env) code(b ...byte) {
	e.t.Helper()
	gpa := uint64(codeGPA)
	if e.c.sregs.CS.Selector&3 == 3 {
		gpa += 0x1000
	}
	require.NoError(e.t, e.mem.WriteAt(b, gpa+e.c.regs.RIP&0xfff))
}

func (e *env) run() (Kind, error) {
	return e.a.Complete(e.c, 0, kvm.InternalError{Suberror: kvm.InternalErrorEmulation})
}

// mustRun completes the instruction and expects no VMM error.
func (e *env) mustRun(want Kind) {
	e.t.Helper()
	k, err := e.run()
	require.NoError(e.t, err)
	require.Equal(e.t, want, k)
}

type injected struct {
	Vector  uint8
	HasCode bool
	Code    uint32
}

// exception is what was injected, nil if nothing.
func (e *env) exception() *injected {
	if e.c.setEvents == 0 {
		return nil
	}
	ev := e.c.events.Exception
	if ev.Injected == 0 {
		return nil
	}
	return &injected{ev.Nr, ev.HasErrorCode != 0, ev.ErrorCode}
}

func (e *env) read(gpa uint64, n int) []byte {
	e.t.Helper()
	b := make([]byte, n)
	require.NoError(e.t, e.mem.ReadAt(b, gpa))
	return b
}

func (e *env) put64(gpa, v uint64) {
	e.t.Helper()
	require.NoError(e.t, e.mem.PutUint64(gpa, v))
}

func (e *env) get64(gpa uint64) uint64 {
	e.t.Helper()
	v, err := e.mem.Uint64(gpa)
	require.NoError(e.t, err)
	return v
}

var (
	exGP0 = &injected{Vector: vecGP, HasCode: true}
	exUD  = &injected{Vector: vecUD}
)

func exPF(code uint32) *injected { return &injected{Vector: vecPF, HasCode: true, Code: code} }
