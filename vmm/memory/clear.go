package memory

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Clear zeroes all of guest RAM and gives its pages back to the host, as
// at power-on (a VM reset). RAM in a shared memfd has its file punched
// out, so every mapping of it (KVM's included, through the MMU notifier)
// reads zeros; RAM mapped privately from a snapshot file would fall back
// to the file's pages on MADV_DONTNEED, so each region is replaced by
// anonymous zero pages at the same address instead, and stops being read
// from the file. The vCPUs must be stopped and no device may touch RAM.
func (g *Guest) Clear() error {
	for _, r := range g.regions {
		if g.shared && g.file != nil {
			if err := unix.Fallocate(int(g.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, r.Offset, int64(r.Size)); err != nil {
				return fmt.Errorf("clearing guest RAM [%#x+%#x]: %w", r.GPA, r.Size, err)
			}
			continue
		}
		addr := uintptr(unsafe.Pointer(&r.Data[0]))
		_, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(r.Size), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE, ^uintptr(0), 0)
		if errno != 0 {
			return fmt.Errorf("clearing guest RAM [%#x+%#x]: %w", r.GPA, r.Size, errno)
		}
	}
	return nil
}
