package boot

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/memory"
)

const testRAM = 64 << 20

var le = binary.LittleEndian

func newMem(t testing.TB, size uint64) *memory.Guest {
	t.Helper()
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: size}})
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	return mem
}

func zeroPage(t *testing.T, mem *memory.Guest) []byte {
	t.Helper()
	bp := make([]byte, bpSize)
	require.NoError(t, mem.ReadAt(bp, x86.BootParamsAddr))
	return bp
}

// bz describes a synthetic bzImage: a setup area holding just the setup
// header (boot protocol 2.15 layout) followed by a payload.
type bz struct {
	version     uint16
	xloadflags  uint16
	setupSects  byte
	initSize    uint32
	cmdlineSize uint32
	initrdMax   uint32
	payload     []byte
	noBootFlag  bool
	noHdrS      bool
}

func defaultBz() bz {
	p := make([]byte, 3*memory.PageSize+123)
	for i := range p {
		p[i] = byte(i*13 + 1)
	}
	return bz{version: 0x020f, xloadflags: xlfKernel64 | 0x2, setupSects: 4, initSize: 8 << 20,
		cmdlineSize: 2047, initrdMax: 0x7fffffff, payload: p}
}

// headerEnd is where the 2.15 setup header ends: 0x202 + the jump byte.
const headerJump = 0x26c - 0x202

func (b bz) bytes() []byte {
	sects := int(b.setupSects)
	if sects == 0 {
		sects = 4
	}
	k := make([]byte, (sects+1)*512+len(b.payload))
	k[hdrSetupSects] = b.setupSects
	if !b.noBootFlag {
		le.PutUint16(k[hdrBootFlag:], bootFlagMagic)
	}
	k[hdrJump], k[hdrJump+1] = 0xeb, headerJump
	if !b.noHdrS {
		copy(k[hdrMagic:], "HdrS")
	}
	le.PutUint16(k[hdrVersion:], b.version)
	k[hdrLoadflags] = loadedHigh
	le.PutUint32(k[hdrInitrdAddrMax:], b.initrdMax)
	le.PutUint32(k[hdrKernelAlign:], 0x200000)
	le.PutUint16(k[hdrXLoadflags:], b.xloadflags)
	le.PutUint32(k[hdrCmdlineSize:], b.cmdlineSize)
	le.PutUint32(k[hdrInitSize:], b.initSize)
	le.PutUint64(k[0x258:], 0x1000000) // pref_address: must be copied through untouched
	copy(k[(sects+1)*512:], b.payload)
	return k
}

// seg is a program header of a synthetic ELF64 file.
type seg struct {
	typ          uint32
	vaddr, paddr uint64
	data         []byte
	memsz        uint64
	filesz       uint64 // 0: len(data)
}

// elf64 writes an x86-64 ELF executable: header, program headers, then
// each segment's bytes.
func elf64(machine uint16, entry uint64, segs ...seg) []byte {
	const ehsize, phsize = 64, 56
	h := make([]byte, ehsize+phsize*len(segs))
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // ELFCLASS64, little-endian, version 1
	le.PutUint16(h[16:], 2)    // ET_EXEC
	le.PutUint16(h[18:], machine)
	le.PutUint32(h[20:], 1)
	le.PutUint64(h[24:], entry)
	le.PutUint64(h[32:], ehsize)
	le.PutUint16(h[52:], ehsize)
	le.PutUint16(h[54:], phsize)
	le.PutUint16(h[56:], uint16(len(segs)))
	le.PutUint16(h[58:], 64)
	off := uint64(len(h))
	var body []byte
	for i, s := range segs {
		p := h[ehsize+phsize*i:]
		filesz := s.filesz
		if filesz == 0 {
			filesz = uint64(len(s.data))
		}
		le.PutUint32(p[0:], s.typ)
		le.PutUint32(p[4:], 5) // R+X
		le.PutUint64(p[8:], off)
		le.PutUint64(p[16:], s.vaddr)
		le.PutUint64(p[24:], s.paddr)
		le.PutUint64(p[32:], filesz)
		le.PutUint64(p[40:], s.memsz)
		le.PutUint64(p[48:], 0x200000)
		body = append(body, s.data...)
		off += uint64(len(s.data))
	}
	return append(h, body...)
}

const (
	ptLoad     = 1
	ptNote     = 4
	emX86_64   = 62
	kernelVirt = 0xffffffff81000000
	kernelPhys = 0x1000000
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*3 + seed | 1
	}
	return b
}

func defaultELF() []byte {
	return elf64(emX86_64, kernelVirt,
		seg{typ: ptLoad, vaddr: kernelVirt, paddr: kernelPhys, data: pattern(0x3000, 1), memsz: 0x3000},
		seg{typ: ptNote, vaddr: 0, paddr: 0, data: []byte("note"), memsz: 4},
		seg{typ: ptLoad, vaddr: kernelVirt + 0x200000, paddr: kernelPhys + 0x200000, data: pattern(0x1800, 2), memsz: 0x5000},
	)
}

func TestLoadBzImage(t *testing.T) {
	mem := newMem(t, testRAM)
	img := defaultBz()
	k := img.bytes()
	e820 := x86.E820([]memory.Layout{{GPA: 0, Size: testRAM}})
	initrd := pattern(3*memory.PageSize+7, 9)
	l, err := Load(mem, Params{Kernel: k, Initrd: initrd, Cmdline: "console=ttyS0 quiet", E820: e820})
	require.NoError(t, err)

	assert.Equal(t, "bzImage", l.Format)
	assert.Equal(t, uint64(0x100200), l.Entry, "64-bit entry is 0x200 past the 1 MiB load address")
	assert.Equal(t, uint64(0x100000), l.KernelStart)
	assert.Equal(t, uint64(0x100000+8<<20), l.KernelEnd, "init_size reserved for decompression")

	got := make([]byte, len(img.payload))
	require.NoError(t, mem.ReadAt(got, 0x100000))
	assert.True(t, bytes.Equal(img.payload, got), "protected-mode payload at 1 MiB")

	bp := zeroPage(t, mem)
	// the setup header is copied, then the loader's fields are filled in
	want := bytes.Clone(k[hdrStart : 0x202+headerJump])
	hdr := bp[hdrStart : 0x202+headerJump]
	for _, f := range []struct{ off, n int }{
		{hdrTypeOfLoader, 1}, {hdrLoadflags, 1}, {hdrRamdiskImage, 4}, {hdrRamdiskSize, 4},
		{hdrHeapEndPtr, 2}, {hdrCmdLinePtr, 4}, {hdrCmdlineSize, 4},
	} {
		copy(want[f.off-hdrStart:f.off-hdrStart+f.n], hdr[f.off-hdrStart:])
	}
	assert.Equal(t, want, hdr, "setup header copied from the image")
	assert.Equal(t, uint64(0x1000000), le.Uint64(bp[0x258:]), "pref_address copied")
	assert.Equal(t, byte(0xff), bp[hdrTypeOfLoader], "type_of_loader: undefined boot loader")
	assert.Equal(t, byte(loadedHigh|canUseHeap), bp[hdrLoadflags])
	assert.Equal(t, uint16(0xfe00), le.Uint16(bp[hdrHeapEndPtr:]))

	checkCmdline(t, mem, bp, "console=ttyS0 quiet")
	checkE820(t, bp, e820)
	checkInitrd(t, mem, bp, l, initrd, testRAM)
}

func checkCmdline(t *testing.T, mem *memory.Guest, bp []byte, cmdline string) {
	t.Helper()
	assert.Equal(t, uint32(x86.CmdlineAddr), le.Uint32(bp[hdrCmdLinePtr:]))
	assert.Zero(t, le.Uint32(bp[bpExtCmdLinePtr:]))
	got := make([]byte, len(cmdline)+1)
	require.NoError(t, mem.ReadAt(got, x86.CmdlineAddr))
	assert.Equal(t, cmdline+"\x00", string(got), "NUL-terminated command line")
}

func checkE820(t *testing.T, bp []byte, e820 []x86.E820Entry) {
	t.Helper()
	require.Equal(t, byte(len(e820)), bp[bpE820Entries])
	for i, e := range e820 {
		o := bpE820Table + 20*i
		assert.Equal(t, e, x86.E820Entry{Addr: le.Uint64(bp[o:]), Size: le.Uint64(bp[o+8:]), Type: le.Uint32(bp[o+16:])}, "entry %d", i)
	}
	assert.True(t, allZero(bp[bpE820Table+20*len(e820):bpE820Table+20*e820Max]), "no entries past the count")
}

func checkInitrd(t *testing.T, mem *memory.Guest, bp []byte, l *Loaded, initrd []byte, top uint64) {
	t.Helper()
	addr := uint64(le.Uint32(bp[hdrRamdiskImage:])) | uint64(le.Uint32(bp[bpExtRamdiskImage:]))<<32
	size := uint64(le.Uint32(bp[hdrRamdiskSize:])) | uint64(le.Uint32(bp[bpExtRamdiskSize:]))<<32
	assert.Equal(t, l.InitrdAddr, addr)
	assert.Equal(t, uint64(len(initrd)), size)
	assert.Zero(t, addr%memory.PageSize, "page aligned")
	assert.LessOrEqual(t, addr+size, top, "below the top")
	assert.Less(t, top-(addr+size), uint64(memory.PageSize), "as high as alignment allows")
	assert.GreaterOrEqual(t, addr, l.KernelEnd, "clear of the kernel")
	got := make([]byte, len(initrd))
	require.NoError(t, mem.ReadAt(got, addr))
	assert.True(t, bytes.Equal(initrd, got), "initrd bytes")
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

func TestLoadBzImageHonoursInitrdAddrMax(t *testing.T) {
	mem := newMem(t, testRAM)
	img := defaultBz()
	img.initrdMax = 48<<20 - 1
	initrd := pattern(5000, 3)
	l, err := Load(mem, Params{Kernel: img.bytes(), Initrd: initrd})
	require.NoError(t, err)
	checkInitrd(t, mem, zeroPage(t, mem), l, initrd, 48<<20)
}

func TestLoadBzImageSetupSectsZeroMeansFour(t *testing.T) {
	mem := newMem(t, testRAM)
	img := defaultBz()
	img.setupSects = 0
	l, err := Load(mem, Params{Kernel: img.bytes()})
	require.NoError(t, err)
	got := make([]byte, 64)
	require.NoError(t, mem.ReadAt(got, l.KernelStart))
	assert.Equal(t, img.payload[:64], got)
}

func TestLoadELF(t *testing.T) {
	mem := newMem(t, testRAM)
	// stale bytes where the bss goes: the loader must zero them
	require.NoError(t, mem.WriteAt(bytes.Repeat([]byte{0xff}, 0x5000), kernelPhys+0x200000))
	e820 := x86.E820([]memory.Layout{{GPA: 0, Size: testRAM}})
	initrd := pattern(10000, 5)
	l, err := Load(mem, Params{Kernel: defaultELF(), Initrd: initrd, Cmdline: "root=/dev/vda", E820: e820})
	require.NoError(t, err)

	assert.Equal(t, "elf", l.Format)
	assert.Equal(t, uint64(kernelPhys), l.Entry, "virtual startup_64 translated to physical")
	assert.Equal(t, uint64(kernelPhys), l.KernelStart)
	assert.Equal(t, uint64(kernelPhys+0x205000), l.KernelEnd, "up to the end of the last segment's bss")

	got := make([]byte, 0x3000)
	require.NoError(t, mem.ReadAt(got, kernelPhys))
	assert.Equal(t, pattern(0x3000, 1), got, "first segment at its physical address")
	got = make([]byte, 0x5000)
	require.NoError(t, mem.ReadAt(got, kernelPhys+0x200000))
	assert.Equal(t, pattern(0x1800, 2), got[:0x1800], "second segment")
	assert.True(t, allZero(got[0x1800:]), "bss zeroed")
	got = make([]byte, 16)
	require.NoError(t, mem.ReadAt(got, 0))
	assert.True(t, allZero(got), "the PT_NOTE (paddr 0) is not loaded")

	bp := zeroPage(t, mem)
	assert.Equal(t, uint16(bootFlagMagic), le.Uint16(bp[hdrBootFlag:]))
	assert.Equal(t, "HdrS", string(bp[hdrMagic:hdrMagic+4]))
	assert.Equal(t, uint16(0x020f), le.Uint16(bp[hdrVersion:]))
	assert.Equal(t, byte(0xff), bp[hdrTypeOfLoader])
	checkCmdline(t, mem, bp, "root=/dev/vda")
	checkE820(t, bp, e820)
	checkInitrd(t, mem, bp, l, initrd, testRAM)
}

func TestLoadELFPhysicalEntry(t *testing.T) {
	// newer linkers put phys_startup_64 (already physical) in e_entry
	mem := newMem(t, testRAM)
	k := elf64(emX86_64, kernelPhys+0x40, seg{typ: ptLoad, vaddr: kernelVirt, paddr: kernelPhys, data: pattern(0x100, 1), memsz: 0x1000})
	l, err := Load(mem, Params{Kernel: k})
	require.NoError(t, err)
	assert.Equal(t, uint64(kernelPhys+0x40), l.Entry)
}

func TestLoadErrors(t *testing.T) {
	bzWith := func(f func(*bz)) []byte {
		b := defaultBz()
		f(&b)
		return b.bytes()
	}
	one := func(s seg) []byte { return elf64(emX86_64, kernelVirt, s) }
	for _, tc := range []struct {
		name   string
		p      Params
		ram    uint64
		target error // nil: an error about the command line / e820
		msg    string
	}{
		{"empty", Params{}, 0, ErrBadKernel, "too short"},
		{"too short", Params{Kernel: make([]byte, 1023)}, 0, ErrBadKernel, "too short"},
		{"no boot flag", Params{Kernel: bzWith(func(b *bz) { b.noBootFlag = true })}, 0, ErrBadKernel, "HdrS"},
		{"no HdrS magic", Params{Kernel: bzWith(func(b *bz) { b.noHdrS = true })}, 0, ErrBadKernel, "HdrS"},
		{"old protocol 2.11", Params{Kernel: bzWith(func(b *bz) { b.version = 0x020b })}, 0, ErrBadKernel, "2.11"},
		{"no 64-bit entry", Params{Kernel: bzWith(func(b *bz) { b.xloadflags = 0x2 })}, 0, ErrBadKernel, "64-bit"},
		{"setup runs past the file", Params{Kernel: bzWith(func(b *bz) { b.setupSects = 200; b.payload = nil })}, 0, ErrBadKernel, "past the end"},
		{"payload ends before the 64-bit entry", Params{Kernel: bzWith(func(b *bz) { b.payload = make([]byte, 0x200) })}, 0, ErrBadKernel, "before its 64-bit entry"},
		{"bzImage needs more than RAM", Params{Kernel: bzWith(func(b *bz) { b.initSize = 100 << 20 })}, 0, ErrTooSmall, "decompress"},
		{"truncated ELF", Params{Kernel: defaultELF()[:40]}, 0, ErrBadKernel, ""},
		{"ELF for another machine", Params{Kernel: elf64(3, kernelPhys, seg{typ: ptLoad, paddr: kernelPhys, data: []byte{1}, memsz: 1})}, 0, ErrBadKernel, "x86-64"},
		{"ELF without PT_LOAD", Params{Kernel: elf64(emX86_64, kernelPhys, seg{typ: ptNote, data: []byte{1}, memsz: 1})}, 0, ErrBadKernel, "no loadable"},
		{"segment beyond RAM", Params{Kernel: one(seg{typ: ptLoad, vaddr: kernelVirt, paddr: 60 << 20, data: []byte{1}, memsz: 8 << 20})}, 0, ErrTooSmall, "past RAM"},
		{"segment in the MMIO hole", Params{Kernel: one(seg{typ: ptLoad, paddr: 0xfec00000, data: []byte{1}, memsz: 1})}, 0, ErrTooSmall, ""},
		{"segment below 1 MiB", Params{Kernel: elf64(emX86_64, 0x80000, seg{typ: ptLoad, paddr: 0x80000, data: []byte{1}, memsz: 0x1000})}, 0, ErrBadKernel, "low memory"},
		{"segment wraps the address space", Params{Kernel: one(seg{typ: ptLoad, paddr: 0xfffffffffffff000, data: []byte{1}, memsz: 0x2000})}, 0, ErrBadKernel, ""},
		{"file size > memory size", Params{Kernel: one(seg{typ: ptLoad, vaddr: kernelVirt, paddr: kernelPhys, data: []byte{1, 2}, memsz: 1})}, 0, ErrBadKernel, "file size"},
		{"segment data past the end of the file", Params{Kernel: one(seg{typ: ptLoad, vaddr: kernelVirt, paddr: kernelPhys, data: []byte{1}, filesz: 0x10000, memsz: 0x10000})}, 0, ErrBadKernel, ""},
		{"entry outside the segments", Params{Kernel: elf64(emX86_64, kernelVirt+0x100000, seg{typ: ptLoad, vaddr: kernelVirt, paddr: kernelPhys, data: []byte{1}, memsz: 0x1000})}, 0, ErrBadKernel, "entry point"},
		{"initrd larger than RAM", Params{Kernel: defaultELF(), Initrd: make([]byte, testRAM)}, 0, ErrTooSmall, "initrd"},
		{"kernel and initrd don't fit together", Params{Kernel: defaultELF(), Initrd: make([]byte, 47<<20)}, 0, ErrTooSmall, "kernel"},
		{"bzImage and initrd don't fit together", Params{Kernel: defaultBz().bytes(), Initrd: make([]byte, 24<<20)}, 32 << 20, ErrTooSmall, "initrd"},
		{"cmdline longer than the kernel accepts", Params{Kernel: bzWith(func(b *bz) { b.cmdlineSize = 10 }), Cmdline: "console=ttyS0"}, 0, nil, "command line"},
		{"cmdline longer than the zero page allows", Params{Kernel: defaultELF(), Cmdline: strings.Repeat("x", x86.CmdlineMax)}, 0, nil, "command line"},
		{"cmdline with NUL", Params{Kernel: defaultELF(), Cmdline: "quiet\x00init=/bin/sh"}, 0, nil, "NUL"},
		{"too many e820 entries", Params{Kernel: defaultELF(), E820: make([]x86.E820Entry, e820Max+1)}, 0, nil, "e820"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ram := tc.ram
			if ram == 0 {
				ram = testRAM
			}
			mem := newMem(t, ram)
			l, err := Load(mem, tc.p)
			require.Error(t, err)
			assert.Nil(t, l)
			if tc.target != nil {
				assert.ErrorIs(t, err, tc.target)
			} else {
				assert.False(t, errors.Is(err, ErrBadKernel) || errors.Is(err, ErrTooSmall), "not a kernel or RAM problem: %v", err)
			}
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestCmdlineAtTheKernelsLimit(t *testing.T) {
	mem := newMem(t, testRAM)
	img := defaultBz()
	img.cmdlineSize = 13
	_, err := Load(mem, Params{Kernel: img.bytes(), Cmdline: "console=ttyS0"})
	require.NoError(t, err, "cmdline_size excludes the NUL")
	checkCmdline(t, mem, zeroPage(t, mem), "console=ttyS0")
}

func TestNoRAMAtZero(t *testing.T) {
	mem, err := memory.New([]memory.Layout{{GPA: 0x100000000, Size: testRAM}})
	require.NoError(t, err)
	defer mem.Close()
	_, err = Load(mem, Params{Kernel: defaultELF()})
	assert.ErrorIs(t, err, ErrTooSmall)
	_, err = Load(mem, Params{Kernel: defaultBz().bytes()})
	assert.ErrorIs(t, err, ErrTooSmall)
}

// guestDir is where hack/guest-image.sh left a real kernel, if anywhere.
func guestDir(t *testing.T) string {
	d := os.Getenv("KUBEVMM_GUEST_DIR")
	if d == "" {
		t.Skip("KUBEVMM_GUEST_DIR is not set: no real kernel to load (build one with hack/guest-image.sh)")
	}
	return d
}

// symbol reads one address from a System.map.
func symbol(t *testing.T, path, name string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[2] == name {
			v, err := strconv.ParseUint(fs[0], 16, 64)
			require.NoError(t, err)
			return v, true
		}
	}
	return 0, false
}

func TestLoadRealVmlinux(t *testing.T) {
	dir := guestDir(t)
	k, err := os.ReadFile(filepath.Join(dir, "vmlinux"))
	require.NoError(t, err)
	mem := newMem(t, 256<<20)
	l, err := Load(mem, Params{Kernel: k, Cmdline: "console=ttyS0"})
	require.NoError(t, err)
	assert.Equal(t, "elf", l.Format)
	if v, ok := symbol(t, filepath.Join(dir, "System.map"), "startup_64"); ok {
		assert.Equal(t, v-startKernelMap, l.Entry, "entry is startup_64's physical address")
	} else {
		t.Logf("no System.map beside vmlinux: checking only that the entry is in the kernel")
	}
	assert.GreaterOrEqual(t, l.Entry, l.KernelStart)
	assert.Less(t, l.Entry, l.KernelEnd)
	if v, ok := symbol(t, filepath.Join(dir, "System.map"), "_end"); ok {
		assert.Equal(t, v-startKernelMap, l.KernelEnd, "memory up to _end (incl. bss) reserved")
	}
	// the entry code in guest memory is the file's bytes at that address
	f, err := elf.NewFile(bytes.NewReader(k))
	require.NoError(t, err)
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && l.Entry >= p.Paddr && l.Entry+64 <= p.Paddr+p.Filesz {
			want := k[p.Off+l.Entry-p.Paddr:][:64]
			got := make([]byte, 64)
			require.NoError(t, mem.ReadAt(got, l.Entry))
			assert.Equal(t, want, got, "kernel text at the entry point")
			found = true
		}
	}
	assert.True(t, found, "a PT_LOAD segment holds the entry point")
}

func TestLoadRealBzImage(t *testing.T) {
	dir := guestDir(t)
	k, err := os.ReadFile(filepath.Join(dir, "bzImage"))
	require.NoError(t, err)
	mem := newMem(t, 256<<20)
	l, err := Load(mem, Params{Kernel: k, Cmdline: "console=ttyS0"})
	require.NoError(t, err)
	assert.Equal(t, "bzImage", l.Format)
	assert.Equal(t, uint64(0x100200), l.Entry)
	bp := zeroPage(t, mem)
	end := 0x202 + int(k[hdrJump+1])
	for _, f := range []struct {
		name string
		off  int
		n    int
	}{
		{"setup_sects", hdrSetupSects, 1}, {"boot_flag", hdrBootFlag, 2}, {"header", hdrMagic, 4},
		{"version", hdrVersion, 2}, {"kernel_alignment", hdrKernelAlign, 4}, {"xloadflags", hdrXLoadflags, 2},
		{"init_size", hdrInitSize, 4}, {"initrd_addr_max", hdrInitrdAddrMax, 4},
	} {
		assert.Equal(t, k[f.off:f.off+f.n], bp[f.off:f.off+f.n], "%s copied", f.name)
	}
	assert.GreaterOrEqual(t, end, hdrInitSize+4, "protocol 2.10+ header")
	setup := (int(k[hdrSetupSects]) + 1) * 512
	got := make([]byte, 4096)
	require.NoError(t, mem.ReadAt(got, l.KernelStart))
	assert.Equal(t, k[setup:setup+4096], got, "payload at 1 MiB")
	t.Logf("bzImage protocol %#x, init_size %d MiB", le.Uint16(k[hdrVersion:]), le.Uint32(k[hdrInitSize:])>>20)
}

// FuzzLoad: whatever the kernel bytes, Load returns an error or a
// consistent result, and never panics.
func FuzzLoad(f *testing.F) {
	const ram = 8 << 20
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: ram}})
	require.NoError(f, err)
	f.Cleanup(func() { mem.Close() })

	small := defaultBz()
	small.initSize = 1 << 20
	f.Add(small.bytes(), uint16(0))
	f.Add(small.bytes()[:1100], uint16(100))
	f.Add(elf64(emX86_64, kernelVirt, seg{typ: ptLoad, vaddr: kernelVirt, paddr: 2 << 20, data: pattern(64, 1), memsz: 0x1000}), uint16(10))
	f.Add(elf64(emX86_64, 2<<20, seg{typ: ptLoad, paddr: 2 << 20, data: pattern(64, 1), memsz: 0x1000}, seg{typ: ptLoad, paddr: 3 << 20, data: nil, memsz: 0x100}), uint16(4096))
	f.Add([]byte("\x7fELF\x02\x01\x01"), uint16(0))

	f.Fuzz(func(t *testing.T, kernel []byte, initrdPages uint16) {
		initrd := make([]byte, int(initrdPages)*64)
		l, err := Load(mem, Params{Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0"})
		if err != nil {
			require.True(t, errors.Is(err, ErrBadKernel) || errors.Is(err, ErrTooSmall) ||
				strings.Contains(err.Error(), "command line"), "unexpected error kind: %v", err)
			require.Nil(t, l)
			return
		}
		require.GreaterOrEqual(t, l.KernelStart, uint64(x86.HighMemStart), "kernel above low memory")
		require.LessOrEqual(t, l.KernelEnd, uint64(ram))
		require.GreaterOrEqual(t, l.Entry, l.KernelStart)
		require.Less(t, l.Entry, l.KernelEnd)
		if len(initrd) > 0 {
			require.GreaterOrEqual(t, l.InitrdAddr, l.KernelEnd)
			require.LessOrEqual(t, l.InitrdAddr+uint64(len(initrd)), uint64(ram))
		}
		require.Contains(t, fmt.Sprint(l.Format), map[bool]string{true: "elf", false: "bzImage"}[bytes.HasPrefix(kernel, []byte("\x7fELF"))])
	})
}
