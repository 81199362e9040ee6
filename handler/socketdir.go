package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// A launcher pod's socket directory is its emptyDir vmispec.SocketsVolume,
// which virt-handler reaches on the node in the kubelet's directory of the
// pod: <kubelet pods dir>/<pod UID>/volumes/kubernetes.io~empty-dir/sockets.
// Everything down to that directory belongs to the kubelet; what is in it
// belongs to the launcher, which is not trusted: it may put a symlink, a
// FIFO or a hard link to a file of root's where a socket is expected. So
// nothing in it is reached by a path string: the directory is opened with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) from a descriptor of the
// pods directory (a pod UID from the API could otherwise name ".." or a
// symlink), and each file in it relative to that descriptor, the same way,
// and checked for its type through the opened descriptor.

// emptyDirPlugin is the kubelet's directory of a pod's emptyDir volumes.
const emptyDirPlugin = "volumes/kubernetes.io~empty-dir"

// socketDir is one launcher pod's socket directory, as virt-handler sees it.
type socketDir struct {
	podsDir string    // the kubelet's pods directory
	podUID  types.UID // "": no pod, so no directory
}

func (d socketDir) String() string {
	if d.podUID == "" {
		return "(no launcher pod)"
	}
	return filepath.Join(d.podsDir, string(d.podUID), emptyDirPlugin, vmispec.SocketsVolume)
}

// beneath resolves a path below the directory it starts from, through no
// symlink (nor a "..", a mount point or a /proc magic link out of it).
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS

// open opens the directory (a descriptor), refusing any symlink on the
// way.
func (d socketDir) open() (int, error) {
	if d.podUID == "" {
		return -1, fmt.Errorf("socket directory: %w", os.ErrNotExist)
	}
	rel := filepath.Join(string(d.podUID), emptyDirPlugin, vmispec.SocketsVolume)
	fd, err := openBeneath(d.podsDir, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, fmt.Errorf("socket directory %s (a symlink is refused): %w", d, err)
	}
	return fd, nil
}

// openBeneath opens rel below dir, a directory of the kubelet's, with
// flags (and O_CLOEXEC): through no symlink, "..", or /proc magic link
// out of it, whatever a pod put on the way.
func openBeneath(dir, rel string, flags int) (int, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", dir, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneath})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return fd, nil
}

// path names name in the directory, for messages.
func (d socketDir) path(name string) string { return filepath.Join(d.String(), name) }

// openIn opens name in the directory dir (O_PATH), without following a
// symlink, and checks it has the type mode (unix.S_IFSOCK, S_IFREG).
func (d socketDir) openIn(dir int, name string, mode uint32) (int, error) {
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: uint64(beneath)})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: d.path(name), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "fstat", Path: d.path(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != mode {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a %s (mode %#o)", d.path(name), typeName(mode), st.Mode)
	}
	return fd, nil
}

func typeName(mode uint32) string {
	if mode == unix.S_IFSOCK {
		return "socket"
	}
	return "regular file"
}

// fdPath names an open descriptor by its /proc/self/fd link, which the
// kernel resolves to the very file the descriptor holds, whatever is at
// the file's path by then. It is also short: the node path of a socket in
// the kubelet's pod directory is longer than a unix socket address may be
// (108 bytes).
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// dial connects to the unix socket name in the directory. connect(2) takes
// a path, not a descriptor: the socket is opened O_PATH as above, checked
// to be a socket, and connected to through its /proc/self/fd link, so a
// launcher that swaps in a symlink to another socket on the node (another
// launcher's, the kubelet's) gets nothing.
func (d socketDir) dial(ctx context.Context, name string) (net.Conn, error) {
	dir, err := d.open()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := d.openIn(dir, name, unix.S_IFSOCK)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", fdPath(fd))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", d.path(name), err)
	}
	return c, nil
}

// exists reports whether name is in the directory (whatever it is).
func (d socketDir) exists(name string) (bool, error) {
	dir, err := d.open()
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	err = unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

// maxRecord bounds what is read from a launcher-written file.
const maxRecord = 1 << 20

// readFile reads the regular file name in the directory, at most maxRecord
// bytes: a FIFO (which would block the reader) or a symlink is refused.
func (d socketDir) readFile(name string) ([]byte, error) {
	dir, err := d.open()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: uint64(beneath)})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: d.path(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path(name))
	defer func() { _ = f.Close() }() // read only: nothing to lose
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", f.Name(), st.Mode())
	}
	return io.ReadAll(io.LimitReader(f, maxRecord))
}

// listen makes the unix socket name in the directory, for the launcher
// running as uid:gid (mode 0600: only it may connect), replacing what the
// launcher may have left there. It is bound through the directory's
// /proc/self/fd link, so it is made in that directory whatever path leads
// there; between bind and the change of owner the launcher could have put
// a symlink or a hard link to a file of root's in its place, so the owner
// is changed through a descriptor that must still be a socket.
func (d socketDir) listen(name string, uid, gid int) (net.Listener, error) {
	dir, err := d.open()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("removing the old %s: %w", d.path(name), err)
	}
	l, err := net.Listen("unix", fdPath(dir)+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", d.path(name), err)
	}
	// The listener's own path names a descriptor that is closed on return;
	// closing the listener must not unlink whatever that path names later.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	fd, err := d.openIn(dir, name, unix.S_IFSOCK)
	if err == nil {
		self := fdPath(fd)
		err = errors.Join(os.Chown(self, uid, gid), os.Chmod(self, 0o600))
		unix.Close(fd)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("giving %s to the launcher: %w", d.path(name), err)
	}
	return l, nil
}

// remove removes name from the directory, if the directory is still there.
func (d socketDir) remove(name string) {
	dir, err := d.open()
	if err != nil {
		return
	}
	defer unix.Close(dir)
	_ = unix.Unlinkat(dir, name, 0) // gone already is fine
}
