package x86

import (
	"encoding/binary"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Model-specific registers the VMM sets at boot or saves in snapshots.
const (
	MSRIA32TSC          = 0x10
	MSRIA32APICBase     = 0x1b
	MSRIA32SysenterCS   = 0x174
	MSRIA32SysenterESP  = 0x175
	MSRIA32SysenterEIP  = 0x176
	MSRIA32MiscEnable   = 0x1a0
	MSRMTRRDefType      = 0x2ff
	MSREFER             = 0xc0000080
	MSRSTAR             = 0xc0000081
	MSRLSTAR            = 0xc0000082
	MSRCSTAR            = 0xc0000083
	MSRSyscallMask      = 0xc0000084
	MSRFSBase           = 0xc0000100
	MSRGSBase           = 0xc0000101
	MSRKernelGSBase     = 0xc0000102
	MSRTSCAux           = 0xc0000103
	miscEnableFastStr   = 1 << 0
	mtrrEnable          = 1 << 11
	mtrrTypeWriteBack   = 6
	cr0PE               = 1 << 0
	cr0MP               = 1 << 1
	cr0ET               = 1 << 4
	cr0NE               = 1 << 5
	cr0WP               = 1 << 16
	cr0AM               = 1 << 18
	cr0PG               = 1 << 31
	cr4PAE              = 1 << 5
	eferLME             = 1 << 8
	eferLMA             = 1 << 10
	bootCS              = 0x10 // __BOOT_CS of the Linux boot protocol
	bootDS              = 0x18 // __BOOT_DS
	bootTSS             = 0x20
	lapicLVTLINT0       = 0x350
	lapicLVTLINT1       = 0x360
	lapicDeliveryExtINT = 0x7 << 8
	lapicDeliveryNMI    = 0x4 << 8
)

// gdt entries: null, unused, 64-bit code, data, TSS. The Linux 64-bit boot
// protocol requires flat __BOOT_CS (0x10) and __BOOT_DS (0x18).
var gdt = []uint64{
	0,
	0,
	0x00af9b000000ffff, // code: present, DPL0, execute/read, long mode, 4 GiB
	0x00cf93000000ffff, // data: present, DPL0, read/write, 32-bit, 4 GiB
	0x008f8b000000ffff, // TSS: present, busy 64-bit TSS
}

// WriteBootTables writes the GDT, an empty IDT and identity-mapping page
// tables for the first 4 GiB (2 MiB pages) into guest memory.
func WriteBootTables(mem *memory.Guest) error {
	b := make([]byte, 8*len(gdt))
	for i, e := range gdt {
		binary.LittleEndian.PutUint64(b[8*i:], e)
	}
	if err := mem.WriteAt(b, GDTAddr); err != nil {
		return fmt.Errorf("write GDT: %w", err)
	}
	if err := mem.WriteAt(make([]byte, 8), IDTAddr); err != nil {
		return fmt.Errorf("write IDT: %w", err)
	}
	pt := make([]byte, 6*memory.PageSize)
	le := binary.LittleEndian
	le.PutUint64(pt[0:], PDPTAddr|3) // PML4[0]: present, writable
	for i := 0; i < 4; i++ {
		le.PutUint64(pt[memory.PageSize+8*i:], uint64(PDAddr+i*memory.PageSize)|3)
		for j := 0; j < 512; j++ {
			addr := uint64(i)<<30 | uint64(j)<<21
			le.PutUint64(pt[2*memory.PageSize+i*memory.PageSize+8*j:], addr|0x83) // present, writable, 2 MiB
		}
	}
	if err := mem.WriteAt(pt, PML4Addr); err != nil {
		return fmt.Errorf("write page tables: %w", err)
	}
	return nil
}

func segment(sel uint16, entry uint64) kvm.Segment {
	return kvm.Segment{
		Base:     0,
		Limit:    0xffffffff,
		Selector: sel,
		Type:     uint8(entry >> 40 & 0xf),
		S:        uint8(entry >> 44 & 1),
		DPL:      uint8(entry >> 45 & 3),
		Present:  uint8(entry >> 47 & 1),
		AVL:      uint8(entry >> 52 & 1),
		L:        uint8(entry >> 53 & 1),
		DB:       uint8(entry >> 54 & 1),
		G:        uint8(entry >> 55 & 1),
	}
}

// SetupLongMode puts a vCPU in 64-bit mode at entry with RSI pointing at the
// boot parameters, as the Linux 64-bit boot protocol wants.
func SetupLongMode(c *kvm.VCPU, entry uint64) error {
	s, err := c.GetSregs()
	if err != nil {
		return err
	}
	s.GDT = kvm.DTable{Base: GDTAddr, Limit: uint16(8*len(gdt) - 1)}
	s.IDT = kvm.DTable{Base: IDTAddr, Limit: 7}
	s.CS = segment(bootCS, gdt[bootCS/8])
	ds := segment(bootDS, gdt[bootDS/8])
	s.DS, s.ES, s.FS, s.GS, s.SS = ds, ds, ds, ds, ds
	s.TR = segment(bootTSS, gdt[bootTSS/8])
	s.TR.Limit = 0x67
	s.CR3 = PML4Addr
	s.CR4 = cr4PAE
	s.CR0 = cr0PE | cr0MP | cr0ET | cr0NE | cr0WP | cr0AM | cr0PG
	s.EFER = eferLME | eferLMA
	if err := c.SetSregs(s); err != nil {
		return err
	}
	regs := &kvm.Regs{RIP: entry, RSI: BootParamsAddr, RSP: BootStackTop, RBP: BootStackTop, RFLAGS: 2}
	return c.SetRegs(regs)
}

// SetupFPU loads the x87/SSE reset state Linux expects.
func SetupFPU(c *kvm.VCPU) error {
	return c.SetFPU(&kvm.FPU{FCW: 0x37f, MXCSR: 0x1f80})
}

// SetupMSRs sets the MSRs every vCPU boots with: syscall MSRs cleared, fast
// strings allowed, MTRRs enabled with write-back as the default type.
func SetupMSRs(c *kvm.VCPU) error {
	entries := []kvm.MSREntry{
		{Index: MSRIA32SysenterCS}, {Index: MSRIA32SysenterESP}, {Index: MSRIA32SysenterEIP},
		{Index: MSRSTAR}, {Index: MSRCSTAR}, {Index: MSRKernelGSBase}, {Index: MSRSyscallMask}, {Index: MSRLSTAR},
		{Index: MSRIA32TSC},
		{Index: MSRIA32MiscEnable, Data: miscEnableFastStr},
		{Index: MSRMTRRDefType, Data: mtrrEnable | mtrrTypeWriteBack},
	}
	n, err := c.SetMSRs(entries)
	if err != nil {
		return err
	}
	if n != len(entries) {
		return fmt.Errorf("vCPU %d: KVM refused boot MSR %#x", c.ID, entries[n].Index)
	}
	return nil
}

// SetupLAPIC wires LINT0 to ExtINT (the PIC) and LINT1 to NMI, as PC
// firmware leaves them.
func SetupLAPIC(c *kvm.VCPU) error {
	l, err := c.GetLAPIC()
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	lint0 := le.Uint32(l.Regs[lapicLVTLINT0:])
	le.PutUint32(l.Regs[lapicLVTLINT0:], lint0&^0x700|lapicDeliveryExtINT)
	lint1 := le.Uint32(l.Regs[lapicLVTLINT1:])
	le.PutUint32(l.Regs[lapicLVTLINT1:], lint1&^0x700|lapicDeliveryNMI)
	return c.SetLAPIC(l)
}
