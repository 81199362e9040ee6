package handler

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/launcher/spec"
)

func owner(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	return st.Sys().(*syscall.Stat_t).Uid
}

// A launcher owns its VMI's socket directory and may plant symlinks (or
// hard links) in it; making and handing over its pods' directories must
// neither follow them nor touch anything outside the socket root.
func TestEnsureSocketDirStaysBeneathTheRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand directories to the launcher's user")
	}
	base := t.TempDir()
	root := filepath.Join(base, "sockets")
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(root, 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root's"), 0o600))

	// The normal case: the VMI's directory, then a pod's inside it.
	vmiDir := filepath.Join(root, "uid1")
	require.NoError(t, ensureSocketDir(root, vmiDir))
	require.NoError(t, ensureSocketDir(root, filepath.Join(vmiDir, "pod-a")))
	assert.Equal(t, uint32(spec.LauncherUID), owner(t, vmiDir))
	assert.Equal(t, uint32(spec.LauncherUID), owner(t, filepath.Join(vmiDir, "pod-a")))
	require.NoError(t, ensureSocketDir(root, vmiDir), "again: nothing to do")

	// What the launcher plants in its directory.
	require.NoError(t, os.Symlink(outside, filepath.Join(vmiDir, "pod-b")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "uid2")))
	require.NoError(t, os.Link(secret, filepath.Join(vmiDir, "pod-c")))
	for _, tc := range []struct{ name, dir, msg string }{
		{"symlinked pod directory", filepath.Join(vmiDir, "pod-b"), "symlink"},
		{"below a symlinked pod directory", filepath.Join(vmiDir, "pod-b", "x"), "symlink"},
		{"symlinked VMI directory", filepath.Join(root, "uid2", "pod"), "symlink"},
		{"hard link to a file", filepath.Join(vmiDir, "pod-c"), "not a directory"},
		{"outside the root", outside, "not below"},
		{"dot-dot", filepath.Join(root, "..", "outside"), "not below"},
		{"the root itself", root, "not below"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, ensureSocketDir(root, tc.dir), tc.msg)
		})
	}
	assert.Equal(t, uint32(0), owner(t, outside), "nothing outside the root changed hands")
	assert.Equal(t, uint32(0), owner(t, secret))
	assert.Equal(t, uint32(0), owner(t, root))
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "nothing made outside the root")
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "root's", string(b))
}

// The migration socket is handed to the launcher's user after bind, in a
// directory the launcher writes: a symlink or a hard link to a file of
// root's in its place is refused and its target keeps its owner and mode.
func TestHandOverSocketChangesOnlyTheSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand a socket to another user")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "out.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, handOverSocket(sock, spec.LauncherUID, spec.LauncherUID))
	st, err := os.Lstat(sock)
	require.NoError(t, err)
	assert.Equal(t, uint32(spec.LauncherUID), st.Sys().(*syscall.Stat_t).Uid)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root's"), 0o640))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "symlink.sock")))
	require.NoError(t, os.Link(secret, filepath.Join(dir, "hardlink.sock")))
	for _, name := range []string{"symlink.sock", "hardlink.sock"} {
		assert.ErrorContains(t, handOverSocket(filepath.Join(dir, name), spec.LauncherUID, spec.LauncherUID), "no longer a socket", name)
	}
	st, err = os.Stat(secret)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
}
