package assist

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Page-table entry and control-register bits used by the walk.
const (
	ptePresent  = 1 << 0
	pteWritable = 1 << 1
	pteUser     = 1 << 2
	pteAccessed = 1 << 5
	pteDirty    = 1 << 6
	pteLarge    = 1 << 7
	pteAddrMask = 0x000ffffffffff000

	cr0EM       = 1 << 2
	cr0TS       = 1 << 3
	cr0WP       = 1 << 16
	cr0PG       = 1 << 31
	cr4OSFXSR   = 1 << 9
	cr4LA57     = 1 << 12
	cr4FSGSBase = 1 << 16
	cr4OSXSAVE  = 1 << 18
	cr4SMAP     = 1 << 21
	rflagsAC    = 1 << 18

	pfPresent = 1 << 0
	pfWrite   = 1 << 1
	pfUser    = 1 << 2
)

// mode is what the walk needs to know about the access and the vCPU.
type mode struct {
	s      *kvm.Sregs
	rflags uint64
	user   bool // access made at CPL 3
}

// translate walks the guest's page tables for one linear address as the
// MMU would for a data access, enforcing present, writable, user and SMAP
// checks, and sets accessed/dirty bits once the access is allowed. A fault
// comes back as an exception to inject; err means the VMM can't continue
// (page tables outside guest RAM).
func translate(mem *memory.Guest, m mode, gva uint64, write bool) (uint64, *exception, error) {
	s := m.s
	if s.CR0&cr0PG == 0 {
		return gva, nil, nil
	}
	levels := 4
	if s.CR4&cr4LA57 != 0 {
		levels = 5
	}
	// non-canonical addresses fault with #GP(0), not #PF; #GP always
	// pushes an error code, and the guest's handler expects one on its stack
	bits := uint(12 + 9*levels)
	if top := int64(gva) >> (bits - 1); top != 0 && top != -1 {
		return 0, gp0(), nil
	}
	errCode := uint32(0)
	if write {
		errCode |= pfWrite
	}
	if m.user {
		errCode |= pfUser
	}
	table := s.CR3 & pteAddrMask
	allWritable, allUser := true, true
	var ptes []*uint64
	var pteAddrs []uint64
	for lvl := levels; lvl >= 1; lvl-- {
		shift := uint(12 + 9*(lvl-1))
		ea := table + (gva>>shift&0x1ff)*8
		b, err := mem.Slice(ea, 8)
		if err != nil {
			return 0, nil, fmt.Errorf("guest page table entry at %#x for %#x: %w", ea, gva, err)
		}
		p := (*uint64)(unsafe.Pointer(&b[0]))
		e := atomic.LoadUint64(p)
		if e&ptePresent == 0 {
			return 0, &exception{vector: vecPF, code: errCode, hasCode: true, cr2: gva}, nil
		}
		allWritable = allWritable && e&pteWritable != 0
		allUser = allUser && e&pteUser != 0
		ptes = append(ptes, p)
		pteAddrs = append(pteAddrs, ea)
		leaf := lvl == 1 || (lvl <= 3 && e&pteLarge != 0)
		if !leaf {
			table = e & pteAddrMask
			continue
		}
		fault := &exception{vector: vecPF, code: errCode | pfPresent, hasCode: true, cr2: gva}
		switch {
		case m.user && !allUser:
			return 0, fault, nil
		case write && !allWritable && (m.user || s.CR0&cr0WP != 0):
			return 0, fault, nil
		case !m.user && allUser && s.CR4&cr4SMAP != 0 && m.rflags&rflagsAC == 0:
			return 0, fault, nil
		}
		for i, q := range ptes {
			set := uint64(pteAccessed)
			if write && i == len(ptes)-1 {
				set |= pteDirty
			}
			if orUint64(q, set) {
				mem.MarkDirty(pteAddrs[i], 8) // a page-table write migration must carry
			}
		}
		mask := uint64(1)<<shift - 1
		return e&pteAddrMask&^mask | gva&mask, nil, nil
	}
	return 0, nil, fmt.Errorf("page walk for %#x ended without a leaf", gva)
}

// orUint64 sets bits in *p atomically and reports whether it changed *p.
func orUint64(p *uint64, bits uint64) bool {
	for {
		old := atomic.LoadUint64(p)
		if old&bits == bits {
			return false
		}
		if atomic.CompareAndSwapUint64(p, old, old|bits) {
			return true
		}
	}
}

// checkRange verifies that every page of [gva, gva+n) is accessible, so that
// an instruction that faults leaves memory untouched, as hardware does.
func checkRange(mem *memory.Guest, m mode, gva, n uint64, write bool) (*exception, error) {
	// Count bytes rather than compare addresses: gva+n may wrap at 2^64,
	// and an address loop would then skip the check or walk the whole
	// address space.
	for done := uint64(0); done < n; {
		p := gva + done
		if _, ex, err := translate(mem, m, p, write); ex != nil || err != nil {
			return ex, err
		}
		done += 0x1000 - p&0xfff
	}
	return nil, nil
}

// access copies between b and guest linear memory at gva, page by page.
// Call checkRange first: a fault here is reported as an error.
func access(mem *memory.Guest, m mode, gva uint64, b []byte, write bool) error {
	for len(b) > 0 {
		gpa, ex, err := translate(mem, m, gva, write)
		if err != nil {
			return err
		}
		if ex != nil {
			return fmt.Errorf("guest address %#x faulted (vector %d) after its range was checked", gva, ex.vector)
		}
		n := min(uint64(len(b)), 0x1000-gva&0xfff)
		slice := mem.Slice
		if write {
			slice = mem.SliceForWrite
		}
		h, err := slice(gpa, n)
		if err != nil {
			return fmt.Errorf("guest address %#x maps to %#x: %w", gva, gpa, err)
		}
		if write {
			copy(h, b[:n])
		} else {
			copy(b[:n], h)
		}
		b = b[n:]
		gva += n
	}
	return nil
}
