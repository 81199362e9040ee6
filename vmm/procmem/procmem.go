// Package procmem says where a VMM process's resident memory goes: guest
// RAM (what the guest touched; not overhead), the binary's mapped pages,
// other files (shared libraries), and anonymous memory split by what the
// Go runtime reports holding (heap, stacks, its own metadata).
//
// Resident sizes come from /proc/self/smaps, where each mapping's Rss is
// counted from its page tables: guest RAM is found by address (the caller
// knows its mappings), so the overhead is exact whatever backs guest RAM
// (a shared memfd, or a snapshot file mapped privately, whose pages turn
// anonymous as the guest writes them).
package procmem

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/internal/uffd"
)

// Range is an address range [Start, End) of this process.
type Range struct{ Start, End uintptr }

// Breakdown is the process's resident memory, in KiB. OverheadKiB is
// RSSKiB minus GuestRAMKiB, and TextKiB + FilesKiB + AnonKiB.
type Breakdown struct {
	RSSKiB      uint64 `json:"rss_kib"`       // every mapping's resident pages
	GuestRAMKiB uint64 `json:"guest_ram_kib"` // resident pages of guest RAM
	OverheadKiB uint64 `json:"overhead_kib"`  // the rest: the VMM's own
	TextKiB     uint64 `json:"text_kib"`      // the binary's mapped pages (code, read-only data, data)
	FilesKiB    uint64 `json:"files_kib"`     // other file mappings (shared libraries, the vDSO)
	AnonKiB     uint64 `json:"anon_kib"`      // anonymous memory outside guest RAM
	// The Go runtime's accounts of its anonymous memory (runtime/metrics),
	// the parts that are resident: what it uses, and its free pages not
	// yet returned to the OS.
	HeapKiB     uint64 `json:"heap_kib"`      // heap objects (live, or dead until the next GC) and the rest of their spans
	HeapFreeKiB uint64 `json:"heap_free_kib"` // free heap not yet returned to the OS
	StacksKiB   uint64 `json:"stacks_kib"`    // goroutine stacks and the runtime's thread stacks
	// OtherAnonKiB is AnonKiB less the three above: the runtime's
	// metadata (GC bitmaps, spans), C allocations and thread stacks.
	OtherAnonKiB uint64 `json:"other_anon_kib"`
	Goroutines   uint64 `json:"goroutines"`
	Threads      int    `json:"threads"`
}

// Mapping is one line of smaps with the sizes this package uses.
type Mapping struct {
	Start, End uintptr
	Perms      string
	Inode      uint64
	Path       string // empty for anonymous memory; [heap], [stack], ... for the kernel's
	RssKiB     uint64
	AnonKiB    uint64
}

// ParseSmaps reads /proc/PID/smaps content.
func ParseSmaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20) // a path may be long
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			// a mapping: start-end perms offset dev inode [path]
			if len(f) < 5 {
				return nil, fmt.Errorf("smaps: malformed mapping %q", line)
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			inode, err3 := strconv.ParseUint(f[4], 10, 64)
			if !ok || err1 != nil || err2 != nil || err3 != nil || end < start {
				return nil, fmt.Errorf("smaps: malformed mapping %q", line)
			}
			m := Mapping{Start: uintptr(start), End: uintptr(end), Perms: f[1], Inode: inode}
			if len(f) > 5 {
				m.Path = afterFields(line, 5)
			}
			out = append(out, m)
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("smaps: %q before any mapping", line)
		}
		var dst *uint64
		switch f[0] {
		case "Rss:":
			dst = &out[len(out)-1].RssKiB
		case "Anonymous:":
			dst = &out[len(out)-1].AnonKiB
		default:
			continue
		}
		if len(f) != 3 || f[2] != "kB" {
			return nil, fmt.Errorf("smaps: malformed size %q", line)
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("smaps: malformed size %q", line)
		}
		*dst = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("smaps: %w", err)
	}
	return out, nil
}

// afterFields is s without its first n fields: a path, spaces included.
func afterFields(s string, n int) string {
	for ; n > 0; n-- {
		s = strings.TrimLeft(s, " \t")
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return ""
		}
		s = s[i:]
	}
	return strings.TrimSpace(s)
}

// codeAddr is an address inside this binary's code: the mapping holding
// it names the binary (found without readlink, which a sandboxed VMM may
// not call, and right for a binary deleted since it started).
var codeAddr = reflect.ValueOf(ParseSmaps).Pointer()

// Self measures this process; guestRAM are the mappings of guest RAM.
func Self(guestRAM []Range) (Breakdown, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Breakdown{}, fmt.Errorf("resident memory: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	maps, err := ParseSmaps(f)
	if err != nil {
		return Breakdown{}, err
	}
	b := classify(maps, guestRAM, codeAddr)
	addRuntime(&b)
	if tasks, err := os.ReadDir("/proc/self/task"); err == nil {
		b.Threads = len(tasks)
	}
	return b, nil
}

// classify sums the mappings' resident sizes: guest RAM by address, the
// binary as the file that holds code, other files, and anonymous memory.
func classify(maps []Mapping, guestRAM []Range, code uintptr) Breakdown {
	var b Breakdown
	exe, _ := binary(maps, code)
	for _, m := range maps {
		b.RSSKiB += m.RssKiB
		if inGuestRAM(m, guestRAM) {
			b.GuestRAMKiB += m.RssKiB
			continue
		}
		switch {
		case exe.Inode != 0 && m.Inode == exe.Inode && m.Path == exe.Path:
			b.TextKiB += m.RssKiB
		case m.Inode != 0 || m.Path == "[vdso]" || m.Path == "[vvar]":
			// file pages, and the private copies written to them
			b.FilesKiB += m.RssKiB - m.AnonKiB
			b.AnonKiB += m.AnonKiB
		default:
			b.AnonKiB += m.RssKiB
		}
	}
	b.OverheadKiB = b.RSSKiB - b.GuestRAMKiB
	return b
}

// binary is the mapping that holds code, the binary's.
func binary(maps []Mapping, code uintptr) (Mapping, bool) {
	for _, m := range maps {
		if code >= m.Start && code < m.End && m.Inode != 0 {
			return m, true
		}
	}
	return Mapping{}, false
}

// inGuestRAM reports whether m lies within one of the ranges (KVM needs
// guest RAM mapped whole, so a mapping is in or out).
func inGuestRAM(m Mapping, rs []Range) bool {
	for _, r := range rs {
		if m.Start >= r.Start && m.End <= r.End {
			return true
		}
	}
	return false
}

// addRuntime splits b's anonymous memory by the Go runtime's accounts.
func addRuntime(b *Breakdown) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/memory/classes/os-stacks:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0 // a metric this Go release dropped
		}
		return s[i].Value.Uint64()
	}
	const kib = 1024
	b.HeapKiB = (v(0) + v(1)) / kib
	b.HeapFreeKiB = v(2) / kib
	b.StacksKiB = (v(3) + v(4)) / kib
	b.Goroutines = v(5)
	// The runtime counts pages it mapped, some never touched: its figures
	// can exceed what is resident.
	if goKiB := b.HeapKiB + b.HeapFreeKiB + b.StacksKiB; goKiB < b.AnonKiB {
		b.OtherAnonKiB = b.AnonKiB - goKiB
	}
}

// DropText drops this process's page-table entries for the binary's
// read-only mappings (code and read-only data). At start the runtime
// initialises every package and setup runs code a running VMM never runs
// again, so most of the binary stays resident. The pages stay in the page
// cache: what runs later is mapped again by a minor fault. Mappings with
// written pages are left alone, those pages exist nowhere else: writable
// data, and read-only data a loader relocated (a position-independent
// build's RELRO).
//
// Before the drop the mappings lose the kernel's fault-around (see
// noFaultAround): otherwise each later fault maps the 64 KiB around it,
// and the code and tables a running VMM touches, a few pages here and
// there (the GC alone reads each stacked function's entry in the PC
// tables), bring most of what was dropped back.
func DropText() error {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return fmt.Errorf("drop text: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	maps, err := ParseSmaps(f)
	if err != nil {
		return fmt.Errorf("drop text: %w", err)
	}
	exe, ok := binary(maps, codeAddr)
	if !ok {
		return nil
	}
	for _, m := range maps {
		if m.Inode != exe.Inode || m.Path != exe.Path || strings.Contains(m.Perms, "w") || m.AnonKiB != 0 {
			continue
		}
		// Where the kernel can't (before Linux 6.7) or the process may not
		// (a seccomp profile without userfaultfd), faults keep mapping
		// their neighbours: the drop still helps, and nothing is lost.
		_ = noFaultAround(m.Start, m.End-m.Start)
		// By address: the range is no Go memory.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("drop text %#x-%#x: %w", m.Start, m.End, errno)
		}
	}
	return nil
}

// wpFD is the userfaultfd that holds the binary's mappings: closing it
// would unregister them, so it stays open for the process's life.
var wpFD struct {
	sync.Mutex
	fd     int
	opened bool
}

// noFaultAround turns off the kernel's fault-around for the mapping at
// [start, start+n): a read fault on a file mapping maps the neighbouring
// pages already in the page cache too (64 KiB by default), and the page
// cache holds the whole binary. Linux offers no flag for that (it
// ignores MADV_RANDOM here), but leaves out fault-around in mappings
// registered with a userfaultfd for write protection, which, with
// UFFD_FEATURE_WP_ASYNC, any mapping may be and which changes nothing
// else: nothing here is ever write-protected, and the mappings are
// read-only anyway. Faults then map only the page they are for.
func noFaultAround(start, n uintptr) error {
	wpFD.Lock()
	defer wpFD.Unlock()
	if !wpFD.opened {
		fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffd.UserModeOnly, 0, 0)
		if errno != 0 {
			return fmt.Errorf("userfaultfd: %w", errno)
		}
		api := uffd.APIArg{API: uffd.API, Features: uffd.FeatureWPAsync}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffd.IocAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
			_ = unix.Close(int(fd)) // a kernel object: nothing to lose
			return fmt.Errorf("userfaultfd: UFFDIO_API with asynchronous write protection (Linux 6.7): %w", errno)
		}
		wpFD.fd, wpFD.opened = int(fd), true
	}
	reg := uffd.RegisterArg{Range: uffd.Range{Start: uint64(start), Len: uint64(n)}, Mode: uffd.RegisterWP}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(wpFD.fd), uffd.IocRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		return fmt.Errorf("userfaultfd: register %#x-%#x for write protection: %w", start, start+n, errno)
	}
	return nil
}

// GCPercent is a VMM process's GOGC. Its live heap is small (a few hundred
// KiB once the guest runs) and allocated slowly, so the runtime's floor of
// a 4 MiB heap target at the default 100 is mostly garbage held resident;
// at 50 the floor is 2 MiB, for a GC cycle of well under a millisecond
// twice as often. No memory limit (GOMEMLIMIT) is set: setup legitimately
// holds a kernel image (tens of MiB) for a moment, and a limit below that
// would make the collector run back to back, delaying the first vCPU
// entry, for nothing it can free.
const GCPercent = 50

// TuneGC sets GCPercent unless the environment's GOGC chose a value.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
}
