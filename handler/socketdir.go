package handler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/launcher/spec"
)

// ensureSocketDir gives the launcher (not root) its socket directory dir,
// under root: the kubelet creates the hostPath directory as root, and the
// launcher waits until it may write there.
//
// Below root the directories belong to launchers, which may plant
// symlinks there (a VMI's directory holds its pods' directories): every
// component is made and opened relative to its parent's descriptor with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and the ownership changed
// through the opened descriptor, so nothing outside root is ever created
// or handed to the launcher.
func ensureSocketDir(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("socket directory %s: not below %s", dir, root)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket directory: opening %s: %w", root, err)
	}
	defer func() { unix.Close(fd) }()
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	for _, name := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("socket directory %s: making %s: %w", dir, name, err)
		}
		next, err := unix.Openat2(fd, name, &how)
		if err != nil {
			return fmt.Errorf("socket directory %s: opening %s (a symlink is refused): %w", dir, name, err)
		}
		unix.Close(fd)
		fd = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if st.Uid == spec.LauncherUID {
		return nil
	}
	if err := unix.Fchown(fd, spec.LauncherUID, spec.LauncherUID); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	return nil
}

// handOverSocket gives the unix socket at path, in a directory a launcher
// may write, to uid:gid with mode 0600. Between bind and here the
// launcher could have put a symlink or a hard link to a file of root's in
// its place: path is opened without following a symlink, must be a
// socket, and is changed through that descriptor (its /proc/self/fd
// link, as an O_PATH descriptor takes no fchown).
func handOverSocket(path string, uid, gid int) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s is no longer a socket (mode %#o)", path, st.Mode)
	}
	self := "/proc/self/fd/" + strconv.Itoa(fd)
	return errors.Join(os.Chown(self, uid, gid), os.Chmod(self, 0o600))
}
