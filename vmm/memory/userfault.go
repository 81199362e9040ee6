package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/internal/uffd"
)

// Userfault support for post-copy migration: guest RAM whose pages are
// missing until the VMM installs them. Any access to a missing page, by a
// vCPU inside KVM or by the VMM itself, blocks in the kernel until the page
// is installed; the kernel reports each such fault on a userfaultfd.

// Userfault is guest RAM registered for missing-page faults.
type Userfault struct {
	g *Guest
	f *os.File // the userfaultfd, non-blocking: reads park a goroutine, not a thread
	// buf holds fault messages between reads.
	buf []byte
}

// Userfault makes the pages set in missing (one bitmap per region of
// Regions(), one bit per page) missing: it punches them out of the memfd
// (they may hold stale data) and registers all of guest RAM with a new
// userfaultfd in missing mode. From then on every access to such a page
// waits until Install or Zero puts it in; so does an access to any other
// hole in the memfd (a page never written here), which the caller then
// serves with Zero. The RAM must be a shared memfd (New); the VM must not
// run yet.
//
// The VMM's own accesses through Slice (and so every accessor) do not
// touch a missing page directly: they ask the kernel to populate the range
// first (MADV_POPULATE_WRITE), a system call that waits for the page like
// a fault would. A Go thread blocked on a plain page fault could not be
// stopped for garbage collection, which would then stall the very
// goroutines that serve faults.
func (g *Guest) Userfault(missing [][]uint64) (*Userfault, error) {
	if !g.shared || g.file == nil {
		return nil, errors.New("userfault: guest RAM is not a shared memfd")
	}
	if len(missing) != len(g.regions) {
		return nil, fmt.Errorf("userfault: %d bitmaps for %d memory regions", len(missing), len(g.regions))
	}
	for i, r := range g.regions {
		pages := r.Size / PageSize
		if uint64(len(missing[i])) != (pages+63)/64 {
			return nil, fmt.Errorf("userfault: bitmap of region %d has %d words, want %d", i, len(missing[i]), (pages+63)/64)
		}
		for p := uint64(0); p < pages; {
			if missing[i][p/64]&(1<<(p%64)) == 0 {
				p++
				continue
			}
			n := uint64(1)
			for p+n < pages && missing[i][(p+n)/64]&(1<<((p+n)%64)) != 0 {
				n++
			}
			err := unix.Fallocate(int(g.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE,
				r.Offset+int64(p*PageSize), int64(n*PageSize))
			if err != nil {
				return nil, fmt.Errorf("userfault: punch %d pages at %#x out of guest RAM: %w", n, r.GPA+p*PageSize, err)
			}
			p += n
		}
	}
	fd, err := newUserfaultfd()
	if err != nil {
		return nil, err
	}
	// The handshake comes before the descriptor goes to Go's poller: until
	// then the kernel reports it as not pollable.
	api := uffd.APIArg{API: uffd.API, Features: uffd.FeatureMissingShmem}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffd.IocAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		unix.Close(int(fd))
		return nil, fmt.Errorf("userfaultfd: UFFDIO_API (missing-page faults on shared memory need Linux 4.11): %w", errno)
	}
	u := &Userfault{g: g, f: os.NewFile(fd, "userfaultfd"), buf: make([]byte, 0, 64*uffd.MsgSize)}
	for _, r := range g.regions {
		reg := uffd.RegisterArg{Range: uffd.Range{Start: uint64(uintptr(unsafe.Pointer(&r.Data[0]))), Len: r.Size}, Mode: uffd.RegisterMissing}
		if err := u.ioctl(uffd.IocRegister, unsafe.Pointer(&reg)); err != nil {
			_ = u.f.Close() // a kernel object: nothing to lose
			return nil, fmt.Errorf("userfaultfd: register guest RAM at %#x (%d MiB): %w", r.GPA, r.Size>>20, err)
		}
		const need = uffd.HasCopy | uffd.HasZeropage
		if reg.Ioctls&need != need {
			_ = u.f.Close() // a kernel object: nothing to lose
			return nil, fmt.Errorf("userfaultfd: guest RAM at %#x does not support UFFDIO_COPY/UFFDIO_ZEROPAGE (ioctls %#x)", r.GPA, reg.Ioctls)
		}
	}
	g.uf.Store(u)
	return u, nil
}

// UserfaultfdDevice is where Linux 6.1 and later offer userfaultfds to
// whoever may open the node, whatever vm.unprivileged_userfaultfd says.
const UserfaultfdDevice = "/dev/userfaultfd"

// newUserfaultfd returns a non-blocking userfaultfd that may handle faults
// in kernel mode (KVM's accesses for a vCPU are kernel-mode faults).
//
// The userfaultfd(2) system call comes first: it needs no file, so it
// works for a VMM that runs as root or with CAP_SYS_PTRACE wherever it
// runs. Without either, and with vm.unprivileged_userfaultfd=0 (the
// default of most distributions), it fails with EPERM, and so does a
// seccomp profile that leaves it out: then /dev/userfaultfd, whose file
// permissions are the whole check (a launcher pod gets the node as a
// device owned by its own user), gives the same descriptor through
// USERFAULTFD_IOC_NEW. The device is not tried first because a VMM run by
// hand as root has no reason to need it, and the node may be missing
// (before Linux 6.1, or a container without it).
func newUserfaultfd() (uintptr, error) {
	const flags = unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
	if errno == 0 {
		return fd, nil
	}
	if errno != unix.EPERM {
		return 0, fmt.Errorf("userfaultfd: %w", errno)
	}
	dev, err := os.OpenFile(UserfaultfdDevice, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("userfaultfd: tried the userfaultfd system call (%w: it needs root, CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1, and a seccomp profile that allows it) and %s (%w: it needs Linux 6.1 or later and read-write access for this user)", errno, UserfaultfdDevice, err)
	}
	fd, _, errno2 := unix.Syscall(unix.SYS_IOCTL, dev.Fd(), uffd.IocNew, flags)
	_ = dev.Close() // the new userfaultfd does not need it; nothing was written
	if errno2 != 0 {
		return 0, fmt.Errorf("userfaultfd: tried the userfaultfd system call (%w) and USERFAULTFD_IOC_NEW on %s (%w)", errno, UserfaultfdDevice, errno2)
	}
	return fd, nil
}

func (u *Userfault) ioctl(req uintptr, arg unsafe.Pointer) error {
	sc, err := u.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := sc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// Faults waits for the next faults and returns the guest-physical
// addresses of the missing pages they hit (page aligned; the same page may
// come more than once). It returns an error once Close was called.
func (u *Userfault) Faults(dst []uint64) ([]uint64, error) {
	b := u.buf[:cap(u.buf)]
	n, err := u.f.Read(b)
	if err != nil {
		return dst, fmt.Errorf("read userfaultfd: %w", err)
	}
	for off := 0; off+uffd.MsgSize <= n; off += uffd.MsgSize {
		m := b[off : off+uffd.MsgSize]
		if m[uffd.MsgEvent] != uffd.EventPagefault {
			continue // no other events were asked for
		}
		gpa, ok := u.g.gpaOf(binary.LittleEndian.Uint64(m[uffd.MsgAddress:]) &^ (PageSize - 1))
		if ok {
			dst = append(dst, gpa)
		}
	}
	return dst, nil
}

// gpaOf translates a host address in guest RAM to a guest-physical one.
func (g *Guest) gpaOf(hva uint64) (uint64, bool) {
	for _, r := range g.regions {
		base := uint64(uintptr(unsafe.Pointer(&r.Data[0])))
		if hva >= base && hva < base+r.Size {
			return r.GPA + hva - base, true
		}
	}
	return 0, false
}

// hvaOf checks that [gpa, gpa+n) is whole pages inside one region and
// returns its host address.
func (u *Userfault) hvaOf(gpa, n uint64) (uint64, error) {
	if gpa%PageSize != 0 || n == 0 || n%PageSize != 0 {
		return 0, fmt.Errorf("userfault: [%#x+%#x] is not whole pages", gpa, n)
	}
	s, err := u.g.slice(gpa, n)
	if err != nil {
		return 0, err
	}
	return uint64(uintptr(unsafe.Pointer(&s[0]))), nil
}

// Install copies data (whole pages) into the missing pages at gpa and
// wakes whoever waits for them. Pages already present are left as they
// are: each page is installed once.
func (u *Userfault) Install(gpa uint64, data []byte) error {
	return u.fill("install", gpa, uint64(len(data)), func(hva, done uint64) (uint64, error) {
		c := uffd.CopyArg{Dst: hva + done, Src: uint64(uintptr(unsafe.Pointer(&data[done]))), Len: uint64(len(data)) - done}
		err := u.ioctl(uffd.IocCopy, unsafe.Pointer(&c))
		return uint64(max(c.Copy, 0)), err
	})
}

// Zero installs zero pages at [gpa, gpa+n), like Install.
func (u *Userfault) Zero(gpa, n uint64) error {
	return u.fill("zero", gpa, n, func(hva, done uint64) (uint64, error) {
		z := uffd.ZeropageArg{Range: uffd.Range{Start: hva + done, Len: n - done}}
		err := u.ioctl(uffd.IocZeropage, unsafe.Pointer(&z))
		return uint64(max(z.Zeropage, 0)), err
	})
}

// fill installs [gpa, gpa+n) with op, which fills from offset done and
// reports how many bytes it placed: a page already present is skipped
// (EEXIST: each page is installed once), a fill the mapping changed under
// (EAGAIN) is retried from where it stopped.
func (u *Userfault) fill(what string, gpa, n uint64, op func(hva, done uint64) (uint64, error)) error {
	hva, err := u.hvaOf(gpa, n)
	if err != nil {
		return err
	}
	for done := uint64(0); done < n; {
		placed, err := op(hva, done)
		done += placed
		switch {
		case err == nil:
		case errors.Is(err, unix.EEXIST):
			done = (done/PageSize + 1) * PageSize
		case errors.Is(err, unix.EAGAIN):
		default:
			return fmt.Errorf("userfault: %s %d pages at %#x: %w", what, n/PageSize, gpa+done, err)
		}
	}
	return nil
}

// Wake wakes whoever waits on the page at gpa, for a fault reported after
// the page was installed.
func (u *Userfault) Wake(gpa uint64) error {
	hva, err := u.hvaOf(gpa, PageSize)
	if err != nil {
		return err
	}
	r := uffd.Range{Start: hva, Len: PageSize}
	if err := u.ioctl(uffd.IocWake, unsafe.Pointer(&r)); err != nil {
		return fmt.Errorf("userfault: wake %#x: %w", gpa, err)
	}
	return nil
}

// Close ends missing-page handling once every page is present: guest RAM
// is unregistered and accesses go straight to memory again.
func (u *Userfault) Close() error {
	u.g.uf.CompareAndSwap(u, nil)
	var first error
	for _, r := range u.g.regions {
		rg := uffd.Range{Start: uint64(uintptr(unsafe.Pointer(&r.Data[0]))), Len: r.Size}
		if err := u.ioctl(uffd.IocUnregister, unsafe.Pointer(&rg)); err != nil && first == nil {
			first = fmt.Errorf("userfaultfd: unregister guest RAM at %#x: %w", r.GPA, err)
		}
	}
	if err := u.f.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// populate makes [s, s+len(s)) of guest RAM present before the VMM
// touches it, waiting for missing pages in a system call (see Userfault).
func populate(s []byte) {
	if len(s) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(&s[0]))
	first := start &^ (PageSize - 1)
	end := (start + uintptr(len(s)) + PageSize - 1) &^ (PageSize - 1)
	for {
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, first, end-first, unix.MADV_POPULATE_WRITE)
		if errno != unix.EINTR && errno != unix.EAGAIN {
			// Any other error is left to the access itself, which then
			// faults and waits the ordinary way.
			return
		}
	}
}
