package x86

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86/acpi"
	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

func TestRAMLayout(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		want []memory.Layout
	}{
		{MinMemory, []memory.Layout{{GPA: 0, Size: MinMemory}}},
		{256 * mib, []memory.Layout{{GPA: 0, Size: 256 * mib}}},
		{3 * gib, []memory.Layout{{GPA: 0, Size: 3 * gib}}},
		{3*gib + 4096, []memory.Layout{{GPA: 0, Size: 3 * gib}, {GPA: 4 * gib, Size: 4096}}},
		{8 * gib, []memory.Layout{{GPA: 0, Size: 3 * gib}, {GPA: 4 * gib, Size: 5 * gib}}},
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			got, err := RAMLayout(tc.size)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			var total uint64
			for _, r := range got {
				total += r.Size
				assert.False(t, r.GPA < MMIOHoleEnd && r.GPA+r.Size > MMIOHoleStart, "region %v overlaps the MMIO hole", r)
			}
			assert.Equal(t, tc.size, total, "all RAM placed")
		})
	}
	for _, size := range []uint64{0, 4096, MinMemory - 4096, 64*mib + 1} {
		_, err := RAMLayout(size)
		assert.Error(t, err, "size %d", size)
	}
}

func TestE820(t *testing.T) {
	assert.Equal(t, []E820Entry{
		{0, EBDAStart, E820RAM},
		{EBDAStart, HighMemStart - EBDAStart, E820Reserved},
		{HighMemStart, 128*mib - HighMemStart, E820RAM},
	}, E820([]memory.Layout{{GPA: 0, Size: 128 * mib}}))

	l, err := RAMLayout(6 * gib)
	require.NoError(t, err)
	e := E820(l)
	require.Len(t, e, 4)
	assert.Equal(t, E820Entry{4 * gib, 3 * gib, E820RAM}, e[3], "RAM above the hole")
	var ram uint64
	for i, x := range e {
		if x.Type == E820RAM {
			ram += x.Size
		}
		if i > 0 {
			assert.GreaterOrEqual(t, x.Addr, e[i-1].Addr+e[i-1].Size, "sorted, no overlap")
		}
	}
	assert.Equal(t, uint64(6*gib-(HighMemStart-EBDAStart)), ram, "everything but the legacy hole is usable")
}

// host is a CPUID table shaped like KVM_GET_SUPPORTED_CPUID on an
// AVX-512 host with PKRU and AMX (components beyond the assist mask).
func host() []kvm.CPUIDEntry {
	var all uint32 = 0xffffffff
	return []kvm.CPUIDEntry{
		{Function: 0, EAX: 0xd},
		{Function: 1, EAX: 0x606a6, EBX: 0xff0a0805, ECX: leaf1ECXFMA | leaf1ECXCX16 | leaf1ECXPCID | leaf1ECXPOPCNT | leaf1ECXXSAVE | leaf1ECXAVX | leaf1ECXRDRAND | 1, EDX: 0x0f8bfbff},
		{Function: 4, Index: 0, EAX: 0x1c004121 | 0x3f<<26},
		{Function: 4, Index: 1, EAX: 0x1c004122 | 0x3f<<26},
		{Function: 7, Index: 0, EBX: all, ECX: all, EDX: all},
		{Function: 0xa, EAX: 0x07300805, EBX: 0xff, EDX: 0x603},
		{Function: 0xb, Index: 0, EAX: 1, EBX: 2, ECX: 0x100, EDX: 7},
		{Function: 0xb, Index: 1, EAX: 6, EBX: 48, ECX: 0x201, EDX: 7},
		{Function: 0xb, Index: 2, EAX: 0, EBX: 0, ECX: 2, EDX: 7},
		{Function: 0xd, Index: 0, EAX: 0x602e7, EBX: 0xa88, ECX: 0x2b00, EDX: 0},
		{Function: 0xd, Index: 1, EAX: 0xf, EBX: 0x988},
		{Function: 0xd, Index: 2, EAX: 256, EBX: 576},
		{Function: 0xd, Index: 5, EAX: 64, EBX: 1088},
		{Function: 0xd, Index: 6, EAX: 512, EBX: 1152},
		{Function: 0xd, Index: 7, EAX: 1024, EBX: 1664},
		{Function: 0xd, Index: 9, EAX: 8, EBX: 2688},
		{Function: 0xd, Index: 17, EAX: 64, EBX: 2752, ECX: 2},
		{Function: 0xd, Index: 18, EAX: 8192, EBX: 2816, ECX: 6},
		{Function: 0x40000000, EAX: 0x40000001, EBX: 0x4b4d564b},
		{Function: 0x40000001, EAX: 0x01fffeff},
	}
}

func find(t *testing.T, es []kvm.CPUIDEntry, fn, idx uint32) (kvm.CPUIDEntry, bool) {
	t.Helper()
	for _, e := range es {
		if e.Function == fn && e.Index == idx {
			return e, true
		}
	}
	return kvm.CPUIDEntry{}, false
}

func mustFind(t *testing.T, es []kvm.CPUIDEntry, fn, idx uint32) kvm.CPUIDEntry {
	t.Helper()
	e, ok := find(t, es, fn, idx)
	require.True(t, ok, "leaf %#x.%d present", fn, idx)
	return e
}

func TestCPUIDPerVCPU(t *testing.T) {
	for _, n := range []int{1, 4} {
		p := CPUIDPolicy{NumCPUs: n}
		for id := 0; id < n; id++ {
			t.Run(fmt.Sprintf("%d-cpus/vcpu%d", n, id), func(t *testing.T) {
				sup := host()
				got := p.ForVCPU(sup, id)
				assert.Equal(t, host(), sup, "the supported table is not modified")

				l1 := mustFind(t, got, 1, 0)
				assert.Equal(t, uint32(id), l1.EBX>>24, "initial APIC ID")
				assert.Equal(t, uint32(n), l1.EBX>>16&0xff, "logical processors")
				assert.Equal(t, uint32(8), l1.EBX>>8&0xff, "CLFLUSH line 64 bytes")
				assert.Equal(t, uint32(0x05), l1.EBX&0xff, "brand index kept")
				assert.NotZero(t, l1.ECX&leaf1ECXHypervisor, "hypervisor bit")
				assert.Equal(t, n > 1, l1.EDX&leaf1EDXHTT != 0, "HTT only with more than one vCPU")
				assert.NotZero(t, l1.ECX&leaf1ECXPOPCNT, "no nested profile: POPCNT stays")

				for _, idx := range []uint32{0, 1, 2} {
					e := mustFind(t, got, 0xb, idx)
					assert.Equal(t, uint32(id), e.EDX, "x2APIC ID in leaf 0xB.%d", idx)
					assert.Equal(t, idx, e.ECX&0xff, "level number")
				}
				smt, core, inv := mustFind(t, got, 0xb, 0), mustFind(t, got, 0xb, 1), mustFind(t, got, 0xb, 2)
				assert.Equal(t, [3]uint32{0, 1, 1}, [3]uint32{smt.EAX, smt.EBX, smt.ECX >> 8 & 0xff}, "SMT level: one thread per core")
				assert.Equal(t, uint32(n), core.EBX, "core level: all vCPUs in the package")
				assert.Equal(t, uint32(2), core.ECX>>8&0xff, "level type core")
				assert.GreaterOrEqual(t, 1<<core.EAX, n, "APIC ID shift covers every vCPU")
				assert.Zero(t, inv.ECX>>8&0xff, "level 2 invalid: end of the topology")

				pmu := mustFind(t, got, 0xa, 0)
				assert.Zero(t, pmu.EAX|pmu.EBX|pmu.ECX|pmu.EDX, "no PMU")
				for _, idx := range []uint32{0, 1} {
					c := mustFind(t, got, 4, idx)
					assert.Equal(t, uint32(n-1), c.EAX>>26, "cores per package - 1")
					assert.Equal(t, 0x121+idx, c.EAX&0x3fff, "cache type and level kept")
				}

				kvmf := mustFind(t, got, 0x40000001, 0)
				assert.Equal(t, uint32(0x01fffeff), kvmf.EAX, "PV features untouched without the nested profile")
				x1 := mustFind(t, got, 0xd, 1)
				assert.Equal(t, uint32(0xf), x1.EAX)
			})
		}
	}
}

func TestCPUIDNestedProfile(t *testing.T) {
	p := CPUIDPolicy{NumCPUs: 2, EmulatedKernelMode: true}
	got := p.ForVCPU(host(), 1)

	kvmf := mustFind(t, got, 0x40000001, 0)
	assert.Zero(t, kvmf.EAX&(1<<7|1<<11|1<<13), "PV unhalt, PV IPI, PV sched-yield hidden: they make hypercalls")
	assert.Equal(t, uint32(0x01fffeff)&^(1<<7|1<<11|1<<13), kvmf.EAX, "other PV features kept")

	x0 := mustFind(t, got, 0xd, 0)
	assert.Equal(t, uint32(0xe7), x0.EAX, "XCR0 mask limited to what guest user mode uses natively")
	assert.Zero(t, x0.EDX)
	x1 := mustFind(t, got, 0xd, 1)
	assert.Zero(t, x1.EAX&(1<<1), "XSAVEC hidden")
	assert.Zero(t, x1.EAX|x1.EBX|x1.ECX|x1.EDX, "XSAVEOPT/XSAVEC/XGETBV1/XSAVES hidden")
	for _, idx := range []uint32{2, 5, 6, 7} {
		_, ok := find(t, got, 0xd, idx)
		assert.True(t, ok, "component %d kept", idx)
	}
	for _, idx := range []uint32{9, 17, 18} {
		_, ok := find(t, got, 0xd, idx)
		assert.False(t, ok, "component %d outside the mask dropped", idx)
	}

	l1 := mustFind(t, got, 1, 0)
	assert.Zero(t, l1.ECX&(leaf1ECXPOPCNT|leaf1ECXRDRAND|leaf1ECXCX16|leaf1ECXPCID|leaf1ECXFMA))
	assert.NotZero(t, l1.ECX&leaf1ECXXSAVE, "XSAVE stays: the kernel must switch AVX state")
	assert.NotZero(t, l1.ECX&leaf1ECXAVX)
	assert.NotZero(t, l1.ECX&leaf1ECXHypervisor)
	assert.Equal(t, uint32(1), l1.EBX>>24, "per-vCPU fields still set")
	l7 := mustFind(t, got, 7, 0)
	assert.NotZero(t, l7.EBX&leaf7EBXAVX512F, "AVX-512F stays")
	assert.Zero(t, l7.EBX&(1<<20), "SMAP hidden")

	xs := XSaveLayoutOf(got)
	assert.Equal(t, uint64(0xe7), xs.Mask, "the assist's layout matches the guest's view")
	assert.Zero(t, xs.Size[9]+xs.Size[17]+xs.Size[18])
}

func TestXSaveLayoutOf(t *testing.T) {
	l := XSaveLayoutOf(host())
	assert.Equal(t, uint64(0x602e7), l.Mask)
	for _, c := range []struct {
		i, size, off uint32
		align        bool
	}{{2, 256, 576, false}, {5, 64, 1088, false}, {6, 512, 1152, false}, {7, 1024, 1664, false}, {9, 8, 2688, false}, {17, 64, 2752, true}, {18, 8192, 2816, true}} {
		assert.Equal(t, c.size, l.Size[c.i], "size of %d", c.i)
		assert.Equal(t, c.off, l.Offset[c.i], "offset of %d", c.i)
		assert.Equal(t, c.align, l.Align64[c.i], "alignment of %d", c.i)
	}
	assert.Zero(t, l.Size[0]+l.Size[1]+l.Size[3], "legacy and absent components have no entry")

	hi := XSaveLayoutOf([]kvm.CPUIDEntry{{Function: 0xd, Index: 0, EAX: 0x3, EDX: 0x1}, {Function: 0xd, Index: 64, EAX: 9}})
	assert.Equal(t, uint64(1<<32|3), hi.Mask, "EDX is the upper half")
	assert.Equal(t, XSaveLayout{Mask: 1<<32 | 3}, hi, "out-of-range subleaf ignored")
}

func TestHostKernelArgs(t *testing.T) {
	assert.Empty(t, HostKernelArgs(false))
	args := HostKernelArgs(true)
	for _, want := range []string{"clearcpuid=", "popcnt", "erms", "nopti", "rodata=off"} {
		assert.Contains(t, args, want)
	}
}

func TestWriteBootTables(t *testing.T) {
	mem := lowMem(t)
	require.NoError(t, WriteBootTables(mem))
	le := binary.LittleEndian
	read := func(gpa uint64) uint64 {
		v, err := mem.Uint64(gpa)
		require.NoError(t, err)
		return v
	}

	t.Run("identity map below 4 GiB", func(t *testing.T) {
		for _, va := range []uint64{0, 0x1000, 0x7000, 0x1fffff, 0x200000, 0x1000000, 0x12345678, 0xbfffffff, 0xc0000000, IOAPICAddr, LAPICAddr + 0x30, 0xffffffff} {
			pml4e := read(PML4Addr + (va>>39&0x1ff)*8)
			require.NotZero(t, pml4e&1, "PML4 entry for %#x present", va)
			pdpte := read(pml4e&^0xfff + (va>>30&0x1ff)*8)
			require.NotZero(t, pdpte&1, "PDPT entry for %#x present", va)
			require.Zero(t, pdpte&0x80, "PDPT entry is not a 1 GiB page")
			pde := read(pdpte&^0xfff + (va>>21&0x1ff)*8)
			require.Equal(t, uint64(0x83), pde&0x83, "PD entry for %#x: present, writable, 2 MiB", va)
			assert.Equal(t, va, pde&0x000fffffffe00000|va&0x1fffff, "%#x maps to itself", va)
		}
	})
	t.Run("nothing mapped above 4 GiB", func(t *testing.T) {
		assert.Zero(t, read(PDPTAddr+4*8)&1)
		assert.Zero(t, read(PML4Addr+8)&1)
		assert.Zero(t, read(PML4Addr+511*8)&1)
	})
	t.Run("GDT has the boot protocol's segments", func(t *testing.T) {
		b := make([]byte, 8*len(gdt))
		require.NoError(t, mem.ReadAt(b, GDTAddr))
		for i, want := range gdt {
			assert.Equal(t, want, le.Uint64(b[8*i:]), "descriptor %d (selector %#x)", i, 8*i)
		}
		cs := le.Uint64(b[bootCS:])
		assert.Equal(t, uint64(1), cs>>53&1, "__BOOT_CS is 64-bit code")
		assert.Equal(t, uint64(1), cs>>47&1, "present")
		assert.Zero(t, cs>>45&3, "DPL 0")
		ds := le.Uint64(b[bootDS:])
		assert.Equal(t, uint64(0x3), ds>>40&0xb, "__BOOT_DS is writable data")
	})
	t.Run("IDT is empty and apart from the GDT", func(t *testing.T) {
		assert.GreaterOrEqual(t, uint64(IDTAddr), uint64(GDTAddr+8*len(gdt)), "IDT after the GDT")
		assert.Zero(t, read(IDTAddr))
	})
	t.Run("boot structures don't overlap", func(t *testing.T) {
		type area struct {
			name       string
			start, end uint64
		}
		areas := []area{
			{"GDT", GDTAddr, GDTAddr + uint64(8*len(gdt))},
			{"IDT", IDTAddr, IDTAddr + 8},
			{"zero page", BootParamsAddr, BootParamsAddr + 0x1000},
			{"stack (2 KiB at least)", BootStackTop - 0x800, BootStackTop},
			{"page tables", PML4Addr, PDAddr + 4*0x1000},
			{"cmdline", CmdlineAddr, CmdlineAddr + CmdlineMax},
			{"MP table", EBDAStart, EBDAStart + uint64(len(BuildMPTable(EBDAStart, MaxCPUs)))},
			{"ACPI tables", acpi.RSDPAddr, HighMemStart}, // acpi.Write keeps them below 1 MiB
		}
		for i, a := range areas {
			for _, b := range areas[i+1:] {
				assert.False(t, a.start < b.end && b.start < a.end, "%s [%#x,%#x) overlaps %s [%#x,%#x)", a.name, a.start, a.end, b.name, b.start, b.end)
			}
		}
	})
	t.Run("RAM too small", func(t *testing.T) {
		mem, err := memory.New([]memory.Layout{{GPA: 0, Size: 0xa000}})
		require.NoError(t, err)
		defer mem.Close()
		assert.ErrorIs(t, WriteBootTables(mem), memory.ErrOutOfRange)
	})
}
