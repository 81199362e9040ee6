package migration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

// userChildEnv makes TestPostCopyAsLauncherUser the child it starts: one
// running as an unprivileged user, with /dev/userfaultfd either owned by
// root ("denied") or by that user ("granted").
const userChildEnv = "KUBEVMM_POSTCOPY_USER_CHILD"

// launcherUser is a user in the launchers' range (api/vmispec's
// LauncherUID: from 2^30), which no process of the host runs as.
const launcherUser = 1<<30 + 4242

// TestPostCopyAsLauncherUser runs post-copy as a launcher does in a
// cluster: not root, no capabilities, vm.unprivileged_userfaultfd=0 (so
// the userfaultfd system call fails with EPERM), the VMM's seccomp filter
// installed, and /dev/userfaultfd handed over owned by the launcher's
// user. Post-copy then works through the device; with the device still
// root's, it fails with an error that names both ways it tried.
func TestPostCopyAsLauncherUser(t *testing.T) {
	switch os.Getenv(userChildEnv) {
	case "denied":
		userfaultDenied(t)
		return
	case "granted":
		postCopyAsUser(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user with its own /dev/userfaultfd")
	}
	var st unix.Stat_t
	if err := unix.Stat(memory.UserfaultfdDevice, &st); err != nil {
		t.Skipf("no %s on this host (Linux 6.1 or later has it): %v", memory.UserfaultfdDevice, err)
	}
	test, err := os.Executable()
	require.NoError(t, err)
	for _, c := range []struct{ mode, owner string }{
		{"denied", "0"},
		{"granted", fmt.Sprint(launcherUser)},
	} {
		t.Run(c.mode, func(t *testing.T) {
			// In a private mount namespace: a tmpfs (no nodev) holds a
			// copy of the test binary the user may run and a node of the
			// host's userfaultfd device with the given owner, mounted
			// over /dev/userfaultfd as a container runtime would.
			dir := t.TempDir()
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-euc", `
dir=$1 major=$2 minor=$3 owner=$4 user=$5 test=$6
mount -t tmpfs -o mode=755 tmpfs "$dir"
cp "$test" "$dir/test" && chmod 755 "$dir/test"
mknod -m 600 "$dir/userfaultfd" c "$major" "$minor" && chown "$owner:$owner" "$dir/userfaultfd"
mount --bind "$dir/userfaultfd" /dev/userfaultfd
exec setpriv --reuid "$user" --regid "$user" --clear-groups --inh-caps=-all "$dir/test" -test.run '^TestPostCopyAsLauncherUser$' -test.v -test.count=1
`, "sh", dir, fmt.Sprint(unix.Major(st.Rdev)), fmt.Sprint(unix.Minor(st.Rdev)), c.owner, fmt.Sprint(launcherUser), test)
			cmd.Env = append(os.Environ(), userChildEnv+"="+c.mode)
			out, err := cmd.CombinedOutput()
			t.Logf("child:\n%s", out)
			if strings.Contains(string(out), "--- SKIP") {
				t.Skip("the child skipped")
			}
			require.NoError(t, err)
			assert.Contains(t, string(out), "--- PASS: TestPostCopyAsLauncherUser")
		})
	}
}

// requireUnprivileged checks the child's premise: the system call is
// refused, so whatever works below works through the device.
func requireUnprivileged(t *testing.T) {
	require.NotZero(t, os.Geteuid(), "the child runs as the launcher's user")
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno == 0 {
		unix.Close(int(fd))
		t.Skip("this host lets unprivileged users call userfaultfd (vm.unprivileged_userfaultfd=1): the device is not needed")
	}
	require.Equal(t, unix.EPERM, errno)
}

func userfaultDenied(t *testing.T) {
	requireUnprivileged(t)
	g, err := memory.New([]memory.Layout{{GPA: 0, Size: 16 * pageSize}})
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Userfault([][]uint64{{1}})
	require.Error(t, err)
	t.Log(err)
	assert.ErrorIs(t, err, unix.EPERM, "the system call's refusal")
	assert.ErrorIs(t, err, fs.ErrPermission, "the device's refusal")
	assert.Contains(t, err.Error(), "userfaultfd system call")
	assert.Contains(t, err.Error(), memory.UserfaultfdDevice)
}

func postCopyAsUser(t *testing.T) {
	requireUnprivileged(t)
	// Post-copy registers guest RAM during the migration, long after the
	// VMM installed its filter: opening the device and its ioctl must
	// pass it (a refused call kills the process, failing the test).
	require.NoError(t, seccomp.Install(seccomp.Kill))
	postCopyFinishes(t)
	if t.Failed() {
		return
	}
	// It was the device: the system call is still refused.
	_, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	assert.True(t, errors.Is(errno, unix.EPERM))
}
