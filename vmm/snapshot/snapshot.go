// Package snapshot writes and reads a VM snapshot directory:
//
//	state.json  manifest: format name and version, the RAM layout, and the
//	            VM's complete state (configuration, vCPUs, irqchip/PIT/clock,
//	            every device's own versioned state) as the machine package
//	            defines it
//	memory      guest RAM, regions back to back at the offsets the manifest
//	            gives; pages that are zero are holes (the file is sparse)
//
// Restoring maps memory privately from the file, so pages are read only
// when the guest touches them and the snapshot is never modified. The
// manifest is written last, atomically: a directory without one is not a
// snapshot.
package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

// Format identifies kubevmm snapshots; Version is bumped on any
// incompatible change of the manifest or memory file.
const (
	Format       = "kubevmm-snapshot"
	Version      = 1
	ManifestFile = "state.json"
	MemoryFile   = "memory"
)

// ErrInvalid is wrapped by every error about a snapshot that can't be used.
var ErrInvalid = errors.New("invalid snapshot")

// Region places one RAM region in the memory file.
type Region struct {
	GPA    uint64 `json:"gpa"`
	Size   uint64 `json:"size"`
	Offset int64  `json:"offset"`
}

// Manifest is state.json.
type Manifest struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	Created time.Time       `json:"created"`
	Memory  []Region        `json:"memory"`
	State   json.RawMessage `json:"state"`
}

// Write saves mem and state (JSON-encoded) into dir, creating it. It
// returns the bytes of RAM actually stored. The VM must be paused.
func Write(dir string, mem *memory.Guest, state any) (int64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("snapshot dir: %w", err)
	}
	// A manifest left from an older snapshot must not describe the new
	// memory file while it is being written.
	os.Remove(filepath.Join(dir, ManifestFile))
	st, err := json.Marshal(state)
	if err != nil {
		return 0, fmt.Errorf("encode VM state: %w", err)
	}
	m := Manifest{Format: Format, Version: Version, Created: time.Now().UTC(), State: st}
	f, err := os.OpenFile(filepath.Join(dir, MemoryFile), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("snapshot memory file: %w", err)
	}
	defer func() { _ = f.Close() }() // error paths; the success path closes below, checked
	var off int64
	var stored int64
	for _, r := range mem.Regions() {
		m.Memory = append(m.Memory, Region{GPA: r.GPA, Size: r.Size, Offset: off})
		for _, rg := range mem.Populated(r) {
			n, err := writeSparse(f, r.Data[rg.Off:rg.Off+rg.Len], off+int64(rg.Off))
			stored += n
			if err != nil {
				return stored, fmt.Errorf("write guest RAM: %w", err)
			}
		}
		off += int64(r.Size)
	}
	if err := f.Truncate(off); err != nil {
		return stored, fmt.Errorf("size memory file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return stored, fmt.Errorf("sync memory file: %w", err)
	}
	if err := f.Close(); err != nil {
		return stored, fmt.Errorf("close memory file: %w", err)
	}
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return stored, err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return stored, fmt.Errorf("write manifest: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return stored, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil {
		return stored, fmt.Errorf("write manifest: %w", err)
	}
	return stored, syncFile(dir)
}

// writeSparse writes the non-zero pages of b at off, leaving zero pages as
// holes.
func writeSparse(f *os.File, b []byte, off int64) (int64, error) {
	const page = memory.PageSize
	var n int64
	for i := 0; i < len(b); {
		if zeroPage(b[i : i+page]) {
			i += page
			continue
		}
		j := i + page
		for j < len(b) && !zeroPage(b[j:j+page]) {
			j += page
		}
		if _, err := f.WriteAt(b[i:j], off+int64(i)); err != nil {
			return n, err
		}
		n += int64(j - i)
		i = j
	}
	return n, nil
}

func zeroPage(b []byte) bool {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	for _, x := range w {
		if x != 0 {
			return false
		}
	}
	return true
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // opened only to Sync, checked below
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// Read opens the snapshot in dir: its manifest, checked, and guest RAM
// mapped privately (lazily) from the memory file.
func Read(dir string) (*Manifest, *memory.Guest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalid, ManifestFile, err)
	}
	if m.Format != Format {
		return nil, nil, fmt.Errorf("%w: format %q, want %q", ErrInvalid, m.Format, Format)
	}
	if m.Version != Version {
		return nil, nil, fmt.Errorf("%w: snapshot format version %d, this VMM reads version %d", ErrInvalid, m.Version, Version)
	}
	if len(m.Memory) == 0 {
		return nil, nil, fmt.Errorf("%w: no memory regions", ErrInvalid)
	}
	f, err := os.Open(filepath.Join(dir, MemoryFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close() // read-only
		return nil, nil, err
	}
	var layout []memory.Layout
	var off int64
	for i, r := range m.Memory {
		if r.Offset != off {
			_ = f.Close() // read-only
			return nil, nil, fmt.Errorf("%w: memory region %d at file offset %d, expected %d", ErrInvalid, i, r.Offset, off)
		}
		// Each region must be whole pages and fit the file's offsets:
		// sizes are added up below and mapped one by one.
		if r.Size == 0 || r.Size%memory.PageSize != 0 || r.Size > math.MaxInt64-uint64(off) || r.GPA%memory.PageSize != 0 {
			_ = f.Close() // read-only
			return nil, nil, fmt.Errorf("%w: memory region %d at %#x of %d bytes", ErrInvalid, i, r.GPA, r.Size)
		}
		layout = append(layout, memory.Layout{GPA: r.GPA, Size: r.Size})
		off += int64(r.Size)
	}
	if fi.Size() != off {
		_ = f.Close() // read-only
		return nil, nil, fmt.Errorf("%w: memory file is %d bytes, the manifest describes %d (truncated or not this snapshot's)", ErrInvalid, fi.Size(), off)
	}
	mem, err := memory.Map(f, layout, unix.MAP_PRIVATE)
	if err != nil {
		_ = f.Close() // read-only
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &m, mem, nil
}
