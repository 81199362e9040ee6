// Package boot loads a Linux kernel into guest memory following the x86
// 64-bit boot protocol (Documentation/arch/x86/boot.rst): a bzImage or an
// uncompressed ELF vmlinux, an initrd, the command line and the e820 map,
// described to the kernel in the zero page (struct boot_params).
package boot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

// ErrBadKernel is wrapped by every error about the kernel image itself.
var ErrBadKernel = errors.New("not a bootable x86-64 Linux kernel")

// ErrTooSmall is wrapped when the kernel, initrd and boot structures do not
// fit in guest RAM.
var ErrTooSmall = errors.New("guest memory too small")

// Offsets in struct boot_params (the zero page) and its setup header.
const (
	bpExtRamdiskImage = 0x0c0
	bpExtRamdiskSize  = 0x0c4
	bpExtCmdLinePtr   = 0x0c8
	bpE820Entries     = 0x1e8
	hdrStart          = 0x1f1
	hdrSetupSects     = 0x1f1
	hdrBootFlag       = 0x1fe
	hdrJump           = 0x200
	hdrMagic          = 0x202
	hdrVersion        = 0x206
	hdrTypeOfLoader   = 0x210
	hdrLoadflags      = 0x211
	hdrRamdiskImage   = 0x218
	hdrRamdiskSize    = 0x21c
	hdrHeapEndPtr     = 0x224
	hdrCmdLinePtr     = 0x228
	hdrInitrdAddrMax  = 0x22c
	hdrKernelAlign    = 0x230
	hdrXLoadflags     = 0x236
	hdrCmdlineSize    = 0x238
	hdrInitSize       = 0x260
	bpE820Table       = 0x2d0
	bpSize            = 0x1000

	e820EntrySize = 20
	e820Max       = 128

	bootFlagMagic   = 0xaa55
	hdrSMagic       = 0x53726448 // "HdrS"
	loadedHigh      = 0x01
	canUseHeap      = 0x80
	xlfKernel64     = 0x01
	minBzVersion    = 0x020c // 2.12: xloadflags, 64-bit entry
	bzLoadAddr      = x86.HighMemStart
	bz64EntryOffset = 0x200
	startKernelMap  = 0xffffffff80000000 // __START_KERNEL_map: virtual base of the kernel image
)

// Params is what to boot.
type Params struct {
	Kernel  []byte
	Initrd  []byte
	Cmdline string
	E820    []x86.E820Entry
}

// Loaded describes where things went.
type Loaded struct {
	Format      string // "bzImage" or "elf"
	Entry       uint64 // 64-bit entry point (guest physical)
	KernelStart uint64
	KernelEnd   uint64 // first byte after the kernel's memory (incl. bss / decompression room)
	InitrdAddr  uint64
}

// lowRAMEnd is the end of the RAM region that starts at 0: the kernel,
// initrd and boot structures must all sit below 4 GiB, in that region.
func lowRAMEnd(mem *memory.Guest) uint64 {
	for _, r := range mem.Regions() {
		if r.GPA == 0 {
			return r.End()
		}
	}
	return 0
}

// Load puts the kernel, initrd, command line and zero page into guest
// memory and returns the 64-bit entry point.
func Load(mem *memory.Guest, p Params) (*Loaded, error) {
	bp := make([]byte, bpSize)
	var l *Loaded
	var err error
	switch {
	case len(p.Kernel) >= 4 && bytes.Equal(p.Kernel[:4], []byte(elf.ELFMAG)):
		l, err = loadELF(mem, p.Kernel, bp)
	default:
		l, err = loadBzImage(mem, p.Kernel, bp)
	}
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	bp[hdrTypeOfLoader] = 0xff
	bp[hdrLoadflags] |= loadedHigh | canUseHeap
	le.PutUint16(bp[hdrHeapEndPtr:], 0xfe00)

	if err := writeCmdline(mem, p.Cmdline, bp); err != nil {
		return nil, err
	}
	if err := placeInitrd(mem, p.Initrd, l, bp); err != nil {
		return nil, err
	}
	if len(p.E820) > e820Max {
		return nil, fmt.Errorf("e820 map has %d entries, the zero page holds %d", len(p.E820), e820Max)
	}
	bp[bpE820Entries] = byte(len(p.E820))
	for i, e := range p.E820 {
		o := bpE820Table + i*e820EntrySize
		le.PutUint64(bp[o:], e.Addr)
		le.PutUint64(bp[o+8:], e.Size)
		le.PutUint32(bp[o+16:], e.Type)
	}
	if err := mem.WriteAt(bp, x86.BootParamsAddr); err != nil {
		return nil, fmt.Errorf("write zero page: %w", err)
	}
	return l, nil
}

func loadBzImage(mem *memory.Guest, k, bp []byte) (*Loaded, error) {
	le := binary.LittleEndian
	if len(k) < 1024 {
		return nil, fmt.Errorf("%w: %d bytes is too short for a bzImage or ELF file", ErrBadKernel, len(k))
	}
	if le.Uint16(k[hdrBootFlag:]) != bootFlagMagic || le.Uint32(k[hdrMagic:]) != hdrSMagic {
		return nil, fmt.Errorf("%w: neither ELF nor bzImage (no boot sector signature / HdrS header)", ErrBadKernel)
	}
	version := le.Uint16(k[hdrVersion:])
	if version < minBzVersion {
		return nil, fmt.Errorf("%w: boot protocol %d.%02d, need 2.12 or later for 64-bit entry", ErrBadKernel, version>>8, version&0xff)
	}
	if le.Uint16(k[hdrXLoadflags:])&xlfKernel64 == 0 {
		return nil, fmt.Errorf("%w: bzImage has no 64-bit entry point (XLF_KERNEL_64 clear)", ErrBadKernel)
	}
	setupSects := int(k[hdrSetupSects])
	if setupSects == 0 {
		setupSects = 4
	}
	setupSize := (setupSects + 1) * 512
	hdrEnd := hdrMagic + int(k[hdrJump+1])
	if setupSize >= len(k) || hdrEnd > len(k) || hdrEnd > bpSize {
		return nil, fmt.Errorf("%w: setup header (%d sectors) runs past the end of the %d-byte file", ErrBadKernel, setupSects, len(k))
	}
	copy(bp[hdrStart:hdrEnd], k[hdrStart:hdrEnd])

	payload := k[setupSize:]
	// The 64-bit entry is 0x200 bytes into the payload: a payload that ends
	// before it would start the guest in whatever follows in RAM.
	if len(payload) <= bz64EntryOffset {
		return nil, fmt.Errorf("%w: the %d-byte protected-mode payload ends before its 64-bit entry at +%#x", ErrBadKernel, len(payload), bz64EntryOffset)
	}
	initSize := uint64(le.Uint32(k[hdrInitSize:]))
	if initSize < uint64(len(payload)) {
		initSize = uint64(len(payload))
	}
	end := bzLoadAddr + initSize
	if end > lowRAMEnd(mem) {
		return nil, fmt.Errorf("%w: the kernel needs %d MiB from 1 MiB to decompress, RAM below 4 GiB ends at %d MiB",
			ErrTooSmall, initSize>>20, lowRAMEnd(mem)>>20)
	}
	if err := mem.WriteAt(payload, bzLoadAddr); err != nil {
		return nil, fmt.Errorf("load kernel: %w", err)
	}
	return &Loaded{Format: "bzImage", Entry: bzLoadAddr + bz64EntryOffset, KernelStart: bzLoadAddr, KernelEnd: end}, nil
}

func loadELF(mem *memory.Guest, k, bp []byte) (*Loaded, error) {
	f, err := elf.NewFile(bytes.NewReader(k))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKernel, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%w: ELF %v %v, want ELFCLASS64 x86-64", ErrBadKernel, f.Class, f.Machine)
	}
	l := &Loaded{Format: "elf", KernelStart: ^uint64(0)}
	low := lowRAMEnd(mem)
	for _, ph := range f.Progs {
		if ph.Type != elf.PT_LOAD || ph.Memsz == 0 {
			continue
		}
		if ph.Filesz > ph.Memsz {
			return nil, fmt.Errorf("%w: segment at %#x has file size %d > memory size %d", ErrBadKernel, ph.Paddr, ph.Filesz, ph.Memsz)
		}
		if ph.Paddr < x86.HighMemStart || ph.Paddr+ph.Memsz < ph.Paddr {
			return nil, fmt.Errorf("%w: segment at physical %#x overlaps low memory", ErrBadKernel, ph.Paddr)
		}
		if ph.Paddr+ph.Memsz > low {
			return nil, fmt.Errorf("%w: kernel segment [%#x+%#x] ends past RAM below 4 GiB (%d MiB)", ErrTooSmall, ph.Paddr, ph.Memsz, low>>20)
		}
		dst, err := mem.Slice(ph.Paddr, ph.Memsz)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTooSmall, err)
		}
		n, err := ph.ReadAt(dst[:ph.Filesz], 0)
		if uint64(n) != ph.Filesz {
			return nil, fmt.Errorf("%w: segment at %#x: read %d of %d bytes: %v", ErrBadKernel, ph.Paddr, n, ph.Filesz, err)
		}
		clear(dst[ph.Filesz:])
		l.KernelStart = min(l.KernelStart, ph.Paddr)
		l.KernelEnd = max(l.KernelEnd, ph.Paddr+ph.Memsz)
	}
	if l.KernelEnd == 0 {
		return nil, fmt.Errorf("%w: ELF file has no loadable segments", ErrBadKernel)
	}
	// vmlinux's entry is phys_startup_64 (physical); older linkers leave
	// the virtual startup_64 there.
	entry := f.Entry
	if entry >= startKernelMap {
		entry -= startKernelMap
	}
	if entry < l.KernelStart || entry >= l.KernelEnd {
		return nil, fmt.Errorf("%w: entry point %#x outside the loaded kernel [%#x, %#x)", ErrBadKernel, f.Entry, l.KernelStart, l.KernelEnd)
	}
	l.Entry = entry
	le := binary.LittleEndian
	le.PutUint16(bp[hdrBootFlag:], bootFlagMagic)
	le.PutUint32(bp[hdrMagic:], hdrSMagic)
	le.PutUint16(bp[hdrVersion:], 0x020f)
	le.PutUint32(bp[hdrKernelAlign:], 0x200000)
	le.PutUint32(bp[hdrInitrdAddrMax:], 0x7fffffff)
	return l, nil
}

func writeCmdline(mem *memory.Guest, cmdline string, bp []byte) error {
	le := binary.LittleEndian
	max := x86.CmdlineMax - 1
	if hs := le.Uint32(bp[hdrCmdlineSize:]); hs != 0 && int(hs) < max {
		max = int(hs)
	}
	if len(cmdline) > max {
		return fmt.Errorf("kernel command line is %d bytes, this kernel accepts %d", len(cmdline), max)
	}
	if bytes.IndexByte([]byte(cmdline), 0) >= 0 {
		return fmt.Errorf("kernel command line contains a NUL byte")
	}
	if err := mem.WriteAt(append([]byte(cmdline), 0), x86.CmdlineAddr); err != nil {
		return fmt.Errorf("write command line: %w", err)
	}
	le.PutUint32(bp[hdrCmdLinePtr:], x86.CmdlineAddr)
	le.PutUint32(bp[hdrCmdlineSize:], uint32(len(cmdline)))
	return nil
}

// placeInitrd puts the initrd as high as the kernel allows below 4 GiB, out
// of the way of the kernel's own early allocations near its image.
func placeInitrd(mem *memory.Guest, initrd []byte, l *Loaded, bp []byte) error {
	if len(initrd) == 0 {
		return nil
	}
	le := binary.LittleEndian
	top := lowRAMEnd(mem)
	if m := uint64(le.Uint32(bp[hdrInitrdAddrMax:])); m != 0 && m+1 < top {
		top = m + 1
	}
	size := uint64(len(initrd))
	if size >= top {
		return fmt.Errorf("%w: initrd of %d MiB does not fit below %d MiB", ErrTooSmall, size>>20, top>>20)
	}
	addr := (top - size) &^ (memory.PageSize - 1)
	if addr < l.KernelEnd {
		return fmt.Errorf("%w: kernel (up to %d MiB) and initrd (%d MiB) need more than the %d MiB of RAM below 4 GiB",
			ErrTooSmall, l.KernelEnd>>20, (size+(1<<20)-1)>>20, lowRAMEnd(mem)>>20)
	}
	if err := mem.WriteAt(initrd, addr); err != nil {
		return fmt.Errorf("load initrd: %w", err)
	}
	le.PutUint32(bp[hdrRamdiskImage:], uint32(addr))
	le.PutUint32(bp[hdrRamdiskSize:], uint32(size))
	le.PutUint32(bp[bpExtRamdiskImage:], uint32(addr>>32))
	le.PutUint32(bp[bpExtRamdiskSize:], uint32(size>>32))
	l.InitrdAddr = addr
	return nil
}
