//go:build linux && amd64

// Package seccomp confines the VMM process, once its VM is set up, to the
// system calls it makes while running a guest: a guest that takes over
// the VMM through a device bug gets no execve, no ptrace, no mount, no new
// processes and no netlink or raw sockets.
//
// Firecracker gives each thread class (API, VMM, vCPU) its own filter.
// That does not map to Go: goroutines move between OS threads, and any
// thread runs the runtime's own work (GC, scheduler, netpoller), so here
// one process-wide allow-list is installed on every thread at once
// (SECCOMP_FILTER_FLAG_TSYNC).
//
// The list (x86-64 only; the filter checks AUDIT_ARCH_X86_64 first):
//
//	group              system calls
//	I/O                read write pread64 pwrite64 readv writev preadv pwritev preadv2 pwritev2
//	                   lseek close fsync fdatasync fallocate ftruncate sendfile copy_file_range
//	files (snapshots,  openat mkdirat unlinkat renameat renameat2 fstat newfstatat statx
//	reports, images)   getdents64 readlinkat fchmod fchmodat fcntl flock
//	memory             mmap munmap mprotect madvise mremap mincore
//	polling            epoll_create1 epoll_ctl epoll_wait epoll_pwait eventfd2 pipe2 ppoll
//	sockets            socket (AF_UNIX, AF_INET, AF_INET6 only) socketpair connect accept
//	                   accept4 bind listen getsockname getpeername setsockopt getsockopt
//	                   sendto recvfrom sendmsg recvmsg shutdown
//	Go runtime         futex clone (threads only: CLONE_THREAD set) sched_yield
//	                   sched_getaffinity nanosleep clock_gettime clock_nanosleep
//	                   rt_sigaction rt_sigprocmask rt_sigreturn sigaltstack tgkill gettid getpid
//	                   getrandom exit exit_group restart_syscall uname getrlimit prlimit64
//	                   (no kill: the runtime signals its own threads with tgkill)
//	glibc threads      set_robust_list rseq; clone3 fails with ENOSYS (its flags are
//	                   out of a filter's reach) so pthread_create falls back to clone
//	ioctl              KVM (type 0xAE), userfaultfd (type 0xAA: post-copy's UFFDIO_*, and
//	                   USERFAULTFD_IOC_NEW on /dev/userfaultfd), TCGETS TCSETS
//	                   TIOCGWINSZ (raw console),
//	                   TUNSETOFFLOAD (the guest negotiates virtio-net offloads while running),
//	                   TUNSETQUEUE (a multi-queue NIC attaches the tap queues the guest uses)
//	post-copy target   userfaultfd memfd_create (or openat of /dev/userfaultfd: files, above,
//	                   when the system call is refused to a non-root VMM); userfaultfd also
//	                   turns off fault-around on the binary's text (vmm/procmem's DropText)
//
// The list is tested, not guessed: cmd/vmm's tests run real VMMs through
// boot, pause, resume, snapshot, restore and migration with --seccomp=kill
// (the default), so a new system call on one of those paths fails a test
// instead of a production VM.
package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// allowed are the system calls allowed with any arguments.
var allowed = []uintptr{
	// I/O on images, taps, sockets, the console.
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_PREAD64, unix.SYS_PWRITE64,
	unix.SYS_READV, unix.SYS_WRITEV, unix.SYS_PREADV, unix.SYS_PWRITEV,
	unix.SYS_PREADV2, unix.SYS_PWRITEV2, unix.SYS_LSEEK, unix.SYS_CLOSE,
	unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_FALLOCATE, unix.SYS_FTRUNCATE,
	unix.SYS_SENDFILE, unix.SYS_COPY_FILE_RANGE,
	// Files: snapshots, reports, image locks (OFD locks are fcntl).
	unix.SYS_OPENAT, unix.SYS_MKDIRAT, unix.SYS_UNLINKAT, unix.SYS_RENAMEAT,
	unix.SYS_RENAMEAT2, unix.SYS_FSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX,
	unix.SYS_GETDENTS64, unix.SYS_READLINKAT, unix.SYS_FCHMOD, unix.SYS_FCHMODAT,
	unix.SYS_FCNTL, unix.SYS_FLOCK,
	// Memory: guest RAM, the runtime's heap, post-copy's populate.
	unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MPROTECT, unix.SYS_MADVISE,
	unix.SYS_MREMAP, unix.SYS_MINCORE,
	// The netpoller, device workers' eventfds.
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_WAIT,
	unix.SYS_EPOLL_PWAIT, unix.SYS_EVENTFD2, unix.SYS_PIPE2, unix.SYS_PPOLL,
	// Sockets: the API, console, vsock and migration (socket itself is
	// filtered by family below).
	unix.SYS_SOCKETPAIR, unix.SYS_CONNECT, unix.SYS_ACCEPT, unix.SYS_ACCEPT4,
	unix.SYS_BIND, unix.SYS_LISTEN, unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME,
	unix.SYS_SETSOCKOPT, unix.SYS_GETSOCKOPT, unix.SYS_SENDTO, unix.SYS_RECVFROM,
	unix.SYS_SENDMSG, unix.SYS_RECVMSG, unix.SYS_SHUTDOWN,
	// The Go runtime.
	unix.SYS_FUTEX, unix.SYS_SCHED_YIELD, unix.SYS_SCHED_GETAFFINITY,
	unix.SYS_NANOSLEEP, unix.SYS_CLOCK_GETTIME, unix.SYS_CLOCK_NANOSLEEP,
	unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN,
	unix.SYS_SIGALTSTACK, unix.SYS_TGKILL, unix.SYS_GETTID, unix.SYS_GETPID,
	unix.SYS_GETRANDOM, unix.SYS_EXIT, unix.SYS_EXIT_GROUP, unix.SYS_RESTART_SYSCALL,
	unix.SYS_UNAME, unix.SYS_GETRLIMIT, unix.SYS_PRLIMIT64,
	// glibc's thread start, in a cgo binary.
	unix.SYS_SET_ROBUST_LIST, unix.SYS_RSEQ,
	// A post-copy migration target's RAM; the binary's text without
	// fault-around.
	unix.SYS_USERFAULTFD, unix.SYS_MEMFD_CREATE,
}

// ioctlTypes are the ioctl type bytes allowed with any number.
var ioctlTypes = []uint32{
	kvm.IoctlType,
	0xaa, // userfaultfd's UFFDIO_*, /dev/userfaultfd's USERFAULTFD_IOC_NEW
}

// ioctls are the other ioctl numbers allowed.
var ioctls = []uint32{
	unix.TCGETS, unix.TCSETS, unix.TIOCGWINSZ,
	unix.TUNSETOFFLOAD, unix.TUNSETQUEUE,
}

// socketFamilies are the address families socket(2) may create.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}

// seccomp_data offsets (linux/seccomp.h): nr, arch, ip, args[6]; the low
// 32 bits of an argument come first (little endian).
const (
	offNr   = 0
	offArch = 4
)

func offArg(i int) uint32 { return 16 + 8*uint32(i) }

// Filter assembles the classic BPF program for mode (Log or Kill).
func Filter(mode Mode) ([]unix.SockFilter, error) {
	var deny uint32
	switch mode {
	case Kill:
		deny = unix.SECCOMP_RET_KILL_PROCESS
	case Log:
		deny = unix.SECCOMP_RET_LOG
	default:
		return nil, fmt.Errorf("no filter for seccomp mode %q", mode)
	}
	var p []unix.SockFilter
	stmt := func(code uint16, k uint32) { p = append(p, unix.SockFilter{Code: code, K: k}) }
	// jeqNext: if A == k run the next instruction, else skip it. Every
	// comparison is followed by its own return, so no jump is longer
	// than one instruction and the program may grow past 255.
	jeqNext := func(k uint32) {
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: 0, Jf: 1})
	}
	allow := func() { stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW) }
	load := func(off uint32) { stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off) }

	// A system call of another ABI has other numbers: always kill.
	load(offArch)
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.AUDIT_ARCH_X86_64, Jt: 1, Jf: 0})
	stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS)
	// x32 system calls (bit 30) share the arch value.
	load(offNr)
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: 0x40000000, Jt: 0, Jf: 1})
	stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS)

	for _, nr := range allowed {
		jeqNext(uint32(nr))
		allow()
	}
	// A checker of argument arg over values, run when the number is nr:
	// block is the instructions that test the loaded argument; the number
	// is reloaded after it for the checks that follow.
	withArg := func(nr uintptr, arg int, block func()) {
		i := len(p)
		p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: uint32(nr)})
		load(offArg(arg))
		block()
		load(offNr)
		p[i].Jf = uint8(len(p) - i - 1)
	}
	withArg(unix.SYS_IOCTL, 1, func() {
		for _, n := range ioctls {
			jeqNext(n)
			allow()
		}
		stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xff00)
		for _, t := range ioctlTypes {
			jeqNext(t << 8)
			allow()
		}
	})
	withArg(unix.SYS_SOCKET, 0, func() {
		for _, f := range socketFamilies {
			jeqNext(f)
			allow()
		}
	})
	// Threads, not processes: the runtime's clone always sets CLONE_THREAD.
	withArg(unix.SYS_CLONE, 0, func() {
		stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, unix.CLONE_THREAD)
		jeqNext(unix.CLONE_THREAD)
		allow()
	})
	// glibc's pthread_create (a cgo binary's threads) tries clone3 first,
	// whose flags sit in memory a filter cannot read: ENOSYS makes it fall
	// back to clone, checked above.
	jeqNext(unix.SYS_CLONE3)
	stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	stmt(unix.BPF_RET|unix.BPF_K, deny)
	if len(p) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("seccomp filter of %d instructions: the kernel takes at most 4096", len(p))
	}
	return p, nil
}

// Install confines every thread of this process to the list, for good.
// Off installs nothing.
func Install(mode Mode) error {
	if mode == Off {
		return nil
	}
	prog, err := Filter(mode)
	if err != nil {
		return err
	}
	// Without no_new_privs an unprivileged process may not install a
	// filter; it also keeps a set-uid exec (not allowed anyway) from
	// gaining privileges.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: PR_SET_NO_NEW_PRIVS: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: installing the filter (%s): %w", mode, errno)
	}
	if r != 0 {
		// TSYNC names a thread it could not synchronise (one with a
		// filter of its own, which this process never installs).
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}
