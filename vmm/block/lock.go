package block

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Images are locked as QEMU locks them, with open file description (OFD)
// locks: a writable open holds an exclusive lock on the whole file and a
// read-only open a shared one, so two VMMs never write one image and none
// reads an image another is writing. OFD locks belong to the open file
// description, not the process: two opens in one process conflict as two
// processes do, and the lock goes away with the last descriptor, also
// when the VMM is killed.

// ErrLocked is wrapped by errors about an image another open holds.
var ErrLocked = errors.New("image is locked")

// Locker is a Disk whose image lock can be let go and taken again while
// the image stays open: a migration source releases its writable images
// once it has stopped and flushed them, for the target to open, and takes
// them back if the migration fails.
type Locker interface {
	Unlock() error
	Lock() error
}

// openLocked opens path read-only or read-write and locks it.
func openLocked(path string, readOnly bool) (*os.File, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, !readOnly); err != nil {
		_ = f.Close() // nothing written yet
		return nil, err
	}
	return f, nil
}

// lockFile takes the lock for f: exclusive when write, else shared.
func lockFile(f *os.File, write bool) error {
	typ := int16(unix.F_RDLCK)
	if write {
		typ = unix.F_WRLCK
	}
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: 0, Len: 0} // the whole file
	err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	mode := "for reading"
	if write {
		mode = "for writing"
	}
	return fmt.Errorf("%w: can't open %s %s: %s", ErrLocked, f.Name(), mode, lockHolder(f))
}

// unlockFile drops f's lock.
func unlockFile(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		return fmt.Errorf("unlock %s: %w", f.Name(), err)
	}
	return nil
}

// lockHolder names who holds a conflicting lock on f where it can tell.
// The kernel reports no owner for OFD locks (l_pid and /proc/locks say
// -1), so it looks for other processes with the file open whose fdinfo
// lists a lock; that needs permission to read their /proc entries.
func lockHolder(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "locked by another process"
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	self := os.Getpid()
	var holders []string
	for _, fd := range fds {
		var fst unix.Stat_t
		if unix.Stat(fd, &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
			continue
		}
		parts := strings.Split(fd, "/") // "", proc, PID, fd, N
		pid, _ := strconv.Atoi(parts[2])
		if pid == self && parts[4] == strconv.Itoa(int(f.Fd())) || !fdHasLock(parts[2], parts[4]) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + parts[2] + "/comm")
		h := fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
		if pid == self {
			h = "this process (another open of the image)"
		}
		holders = append(holders, h)
	}
	if len(holders) == 0 {
		return "locked by another process"
	}
	return "locked by " + strings.Join(holders, ", ")
}

// fdHasLock reports whether /proc/PID/fdinfo/FD lists a lock.
func fdHasLock(pid, fd string) bool {
	f, err := os.Open("/proc/" + pid + "/fdinfo/" + fd)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // read-only
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "lock:") {
			return true
		}
	}
	return false
}
