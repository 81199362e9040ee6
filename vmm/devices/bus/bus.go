// Package bus dispatches guest port I/O and MMIO accesses to the device
// that owns the address.
package bus

import (
	"fmt"
	"sort"
	"sync"
)

// Device handles accesses at offsets relative to the base it was inserted
// at. len(data) is the access width (1, 2, 4 or 8). Read must fill data.
// Devices do their own locking: vCPUs access them concurrently.
type Device interface {
	Read(offset uint64, data []byte)
	Write(offset uint64, data []byte)
}

type entry struct {
	base, size uint64
	name       string
	dev        Device
}

// Bus is a set of non-overlapping address ranges.
type Bus struct {
	mu      sync.RWMutex
	entries []entry // sorted by base
}

// Insert registers dev for [base, base+size).
func (b *Bus) Insert(name string, base, size uint64, dev Device) error {
	if size == 0 || base+size < base {
		return fmt.Errorf("bus: %s: bad range [%#x+%#x]", name, base, size)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.entries {
		if base < e.base+e.size && e.base < base+size {
			return fmt.Errorf("bus: %s [%#x+%#x] overlaps %s [%#x+%#x]", name, base, size, e.name, e.base, e.size)
		}
	}
	b.entries = append(b.entries, entry{base, size, name, dev})
	sort.Slice(b.entries, func(i, j int) bool { return b.entries[i].base < b.entries[j].base })
	return nil
}

// Remove unregisters the range starting at base.
func (b *Bus) Remove(base uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.entries {
		if e.base == base {
			b.entries = append(b.entries[:i], b.entries[i+1:]...)
			return
		}
	}
}

func (b *Bus) find(addr uint64, n int) (Device, uint64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	i := sort.Search(len(b.entries), func(i int) bool { return b.entries[i].base+b.entries[i].size > addr })
	if i == len(b.entries) {
		return nil, 0, false
	}
	e := b.entries[i]
	if addr < e.base || addr+uint64(n) > e.base+e.size {
		return nil, 0, false
	}
	return e.dev, addr - e.base, true
}

// Read dispatches a read; it reports false (and leaves data alone) if no
// device covers the whole access.
func (b *Bus) Read(addr uint64, data []byte) bool {
	d, off, ok := b.find(addr, len(data))
	if ok {
		d.Read(off, data)
	}
	return ok
}

// Write dispatches a write; it reports false if no device covers it.
func (b *Bus) Write(addr uint64, data []byte) bool {
	d, off, ok := b.find(addr, len(data))
	if ok {
		d.Write(off, data)
	}
	return ok
}
