package procmem

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const page = 4096

func rangeOf(b []byte) Range {
	p := uintptr(unsafe.Pointer(&b[0]))
	return Range{Start: p, End: p + uintptr(len(b))}
}

// The guest RAM figure is exactly the pages touched in the given mapping,
// and the overhead is the rest, split without a remainder.
func TestSelfCountsGuestRAMExactly(t *testing.T) {
	ram, err := unix.Mmap(-1, 0, 64*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(ram) }()

	b, err := Self([]Range{rangeOf(ram)})
	require.NoError(t, err)
	assert.Zero(t, b.GuestRAMKiB, "nothing touched yet")
	for i := 0; i < 10; i++ {
		ram[i*page] = 1
	}
	b, err = Self([]Range{rangeOf(ram)})
	require.NoError(t, err)
	assert.EqualValues(t, 10*page/1024, b.GuestRAMKiB)
	assert.Equal(t, b.RSSKiB-b.GuestRAMKiB, b.OverheadKiB)
	assert.Equal(t, b.OverheadKiB, b.TextKiB+b.FilesKiB+b.AnonKiB)
	assert.NotZero(t, b.TextKiB, "the test binary's code runs")
	assert.NotZero(t, b.HeapKiB)
	assert.NotZero(t, b.StacksKiB)
	assert.NotZero(t, b.Goroutines)
	assert.NotZero(t, b.Threads)

	// Without the range, the same pages are anonymous overhead.
	all, err := Self(nil)
	require.NoError(t, err)
	assert.Zero(t, all.GuestRAMKiB)
	assert.GreaterOrEqual(t, all.AnonKiB, b.GuestRAMKiB)
}

// Guest RAM mapped privately from a file (a restored snapshot): the pages
// the guest writes turn anonymous, and are still guest RAM.
func TestSelfPrivateFileMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory")
	require.NoError(t, os.WriteFile(path, make([]byte, 64*page), 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	ram, err := unix.Mmap(int(f.Fd()), 0, 64*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(ram) }()

	// Written, not read: a read would map its neighbours too (the
	// kernel's fault-around), a write copies just its page.
	for i := 0; i < 64; i += 20 {
		ram[i*page] = 1
	}
	b, err := Self([]Range{rangeOf(ram)})
	require.NoError(t, err)
	assert.EqualValues(t, 4*page/1024, b.GuestRAMKiB)
	assert.Equal(t, b.OverheadKiB, b.TextKiB+b.FilesKiB+b.AnonKiB)
}

func TestParseSmaps(t *testing.T) {
	good := `00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/a b
Size:                328 kB
Rss:                 300 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw
7f00-8f00 rw-p 00000000 00:00 0
Rss:                  12 kB
Anonymous:            12 kB
`
	ms, err := ParseSmaps(strings.NewReader(good))
	require.NoError(t, err)
	assert.Equal(t, []Mapping{
		{Start: 0x400000, End: 0x452000, Perms: "r-xp", Inode: 173521, Path: "/usr/bin/a b", RssKiB: 300},
		{Start: 0x7f00, End: 0x8f00, Perms: "rw-p", RssKiB: 12, AnonKiB: 12},
	}, ms)

	for name, in := range map[string]string{
		"size before a mapping": "Rss: 4 kB\n",
		"short mapping line":    "00400000-00452000 r-xp 00000000\n",
		"end before start":      "2000-1000 r-xp 00000000 08:02 1\n",
		"not hex":               "zz-1000 r-xp 00000000 08:02 1\n",
		"size without unit":     "1000-2000 r-xp 00000000 08:02 1\nRss: 4\n",
		"size not a number":     "1000-2000 r-xp 00000000 08:02 1\nRss: x kB\n",
	} {
		_, err := ParseSmaps(strings.NewReader(in))
		assert.Error(t, err, name)
	}
}

// DropText unmaps the binary's read-only pages; the code runs on, faulting
// back what it uses.
func TestDropText(t *testing.T) {
	before, err := Self(nil)
	require.NoError(t, err)
	require.NoError(t, DropText())
	after, err := Self(nil)
	require.NoError(t, err)
	assert.Less(t, after.TextKiB, before.TextKiB)
	// code and read-only data still work: a table from the runtime's
	// read-only data, formatted by code just dropped
	assert.Equal(t, "ff", strconv.FormatUint(255, 16))
}

// A mapping without fault-around gets only the page read: a file mapping
// otherwise maps the neighbours the page cache holds, which here is the
// whole file (just written).
//
// The file is a memfd (shmem) rather than one on disk: fault-around skips
// a page-cache folio that is locked at that moment, and a disk file's
// freshly written folios are locked now and then by writeback, so the
// control case read one page about once in 500 runs (stop 11's CI).
// Nothing locks a memfd's folios in the background.
func TestNoFaultAround(t *testing.T) {
	const pages = 64
	fd, err := unix.MemfdCreate("faultaround", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	file := os.NewFile(uintptr(fd), "faultaround")
	defer func() { _ = file.Close() }()
	_, err = file.Write([]byte(strings.Repeat("x", pages*page)))
	require.NoError(t, err)
	present := func(b []byte) int {
		pm, err := os.Open("/proc/self/pagemap")
		require.NoError(t, err)
		defer func() { _ = pm.Close() }()
		n := 0
		for p := uintptr(unsafe.Pointer(&b[0])); p < uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b)); p += page {
			var e [8]byte
			_, err := pm.ReadAt(e[:], int64(p/page*8))
			require.NoError(t, err)
			n += int(e[7] >> 7) // bit 63: present
		}
		return n
	}
	for _, tc := range []struct {
		name string
		off  bool
	}{{"default", false}, {"off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := unix.Mmap(int(file.Fd()), 0, pages*page, unix.PROT_READ, unix.MAP_PRIVATE)
			require.NoError(t, err)
			defer func() { _ = unix.Munmap(b) }()
			if tc.off {
				require.NoError(t, noFaultAround(uintptr(unsafe.Pointer(&b[0])), uintptr(len(b))))
			}
			require.Equal(t, byte('x'), b[pages/2*page+100])
			if tc.off {
				assert.Equal(t, 1, present(b))
			} else {
				// Linux's default fault-around, 64 KiB; the knob is in debugfs
				assert.Greater(t, present(b), 1)
			}
		})
	}
}
