package kvm

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoKVM is returned by Open when the KVM device is absent or unusable.
var ErrNoKVM = errors.New("KVM is not available")

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if e != 0 {
		return r, e
	}
	return r, nil
}

// ioctlPtr passes a pointer argument; keeping the unsafe.Pointer typed up to
// the syscall keeps the pointee alive and unmoved for its duration.
func ioctlPtr(fd int, req uintptr, p unsafe.Pointer) (uintptr, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(p))
	if e != 0 {
		return r, e
	}
	return r, nil
}

// withEntries lays out a KVM variable-length struct (a header followed by an
// array) in one 8-byte aligned buffer, as the kernel expects it.
func withEntries[H, E any](hdr H, n int) (unsafe.Pointer, *H, []E) {
	hsz := unsafe.Sizeof(hdr)
	var e E
	words := (int(hsz) + n*int(unsafe.Sizeof(e)) + 7) / 8
	buf := make([]uint64, words)
	p := unsafe.Pointer(&buf[0])
	h := (*H)(p)
	*h = hdr
	return p, h, unsafe.Slice((*E)(unsafe.Add(p, hsz)), n)
}

// System is an open /dev/kvm.
type System struct {
	fd       int
	mmapSize int
}

// Open opens the KVM device (normally /dev/kvm) and checks the API version.
func Open(path string) (*System, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoKVM, path, err)
		}
		return nil, fmt.Errorf("%w: open %s: %v", ErrNoKVM, path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	s := &System{fd: fd}
	v, err := ioctl(fd, ioctlGetAPIVersion, 0)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %s: KVM_GET_API_VERSION: %v", ErrNoKVM, path, err)
	}
	if v != APIVersion {
		s.Close()
		return nil, fmt.Errorf("%w: %s: API version %d, want %d", ErrNoKVM, path, v, APIVersion)
	}
	sz, err := ioctl(fd, ioctlGetVCPUMmapSize, 0)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	s.mmapSize = int(sz)
	return s, nil
}

// Close closes the device; VMs created from it stay valid.
func (s *System) Close() error { return unix.Close(s.fd) }

// CheckExtension returns the KVM_CHECK_EXTENSION value of c (0: absent).
func (s *System) CheckExtension(c Cap) (int, error) {
	r, err := ioctl(s.fd, ioctlCheckExtension, uintptr(c))
	if err != nil {
		return 0, fmt.Errorf("KVM_CHECK_EXTENSION(%d): %w", c, err)
	}
	return int(r), nil
}

// SupportedCPUID returns the CPUID leaves KVM can virtualize on this host.
func (s *System) SupportedCPUID() ([]CPUIDEntry, error) {
	for n := 64; n <= 4096; n *= 2 {
		p, h, entries := withEntries[cpuid2Header, CPUIDEntry](cpuid2Header{NEnt: uint32(n)}, n)
		_, err := ioctlPtr(s.fd, ioctlGetSupportedCPUID, p)
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID: %w", err)
		}
		return append([]CPUIDEntry(nil), entries[:h.NEnt]...), nil
	}
	return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID: more than 4096 entries")
}

// MSRIndexList returns the MSRs KVM saves and restores for a vCPU.
func (s *System) MSRIndexList() ([]uint32, error) {
	return s.msrList(ioctlGetMSRIndexList, "KVM_GET_MSR_INDEX_LIST")
}

func (s *System) msrList(req uintptr, name string) ([]uint32, error) {
	for n := 256; n <= 16384; n *= 2 {
		p, h, idx := withEntries[msrList, uint32](msrList{NMSRs: uint32(n)}, n)
		_, err := ioctlPtr(s.fd, req, p)
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return append([]uint32(nil), idx[:h.NMSRs]...), nil
	}
	return nil, fmt.Errorf("%s: list too long", name)
}

// CreateVM creates an empty VM.
func (s *System) CreateVM() (*VM, error) {
	fd, err := ioctl(s.fd, ioctlCreateVM, 0)
	if err != nil {
		return nil, fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	return &VM{fd: int(fd), sys: s}, nil
}
