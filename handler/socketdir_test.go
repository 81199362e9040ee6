package handler

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// testSocketDir makes a launcher pod's socket directory as the kubelet
// lays it out, in a short temporary pods directory (socket paths must fit
// in 108 bytes), and returns it with its path.
func testSocketDir(t *testing.T) (socketDir, string) {
	t.Helper()
	pods, err := os.MkdirTemp("", "pods")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(pods) })
	d := socketDir{podsDir: pods, podUID: "p"}
	require.NoError(t, os.MkdirAll(d.String(), 0o777))
	return d, d.String()
}

func owner(t *testing.T, path string) uint32 {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	return st.Sys().(*syscall.Stat_t).Uid
}

// What a hostile launcher can plant in its socket directory (symlinks to
// other sockets and files of the node, hard links, FIFOs) and what the API
// could name (a pod UID with "..") never lead the handler outside the
// pod's directory: the handler reaches only sockets and files that are
// really in it.
func TestSocketDirStaysInThePodsDirectory(t *testing.T) {
	d, dir := testSocketDir(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte(`{"state":"Running"}`), 0o600))
	other, err := net.Listen("unix", filepath.Join(outside, "other.sock"))
	require.NoError(t, err)
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	// The normal case: a socket and a record in the directory.
	own, err := net.Listen("unix", filepath.Join(dir, vmispec.ControlSocket))
	require.NoError(t, err)
	defer own.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, vmispec.ExitFile), []byte("record"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := d.dial(ctx, vmispec.ControlSocket)
	require.NoError(t, err)
	c.Close()
	b, err := d.readFile(vmispec.ExitFile)
	require.NoError(t, err)
	assert.Equal(t, "record", string(b))

	require.NoError(t, os.Symlink(filepath.Join(outside, "other.sock"), filepath.Join(dir, "symlink.sock")))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "symlink.json")))
	require.NoError(t, os.Link(secret, filepath.Join(dir, "hardlink.sock")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o666))
	for _, tc := range []struct{ name, file, msg string }{
		{"dial a symlink to another socket", "symlink.sock", "not a socket"},
		{"dial a hard link to a file", "hardlink.sock", "not a socket"},
		{"dial a FIFO", "fifo.json", "not a socket"},
		{"dial out with ..", "../../../../" + filepath.Base(outside) + "/other.sock", "cross-device link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.dial(ctx, tc.file)
			assert.ErrorContains(t, err, tc.msg)
		})
	}
	for _, tc := range []struct{ name, file, msg string }{
		{"read a symlink to a file", "symlink.json", "too many levels of symbolic links"},
		{"read a FIFO", "fifo.json", "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.readFile(tc.file)
			assert.ErrorContains(t, err, tc.msg)
		})
	}

	// The directory itself: a pod UID from the API naming a way out, or a
	// socket directory that is a symlink.
	require.NoError(t, os.MkdirAll(filepath.Join(d.podsDir, "q", emptyDirPlugin), 0o755))
	require.NoError(t, os.Symlink(dir, filepath.Join(d.podsDir, "q", emptyDirPlugin, vmispec.SocketsVolume)))
	for _, tc := range []struct {
		name string
		uid  types.UID
		msg  string
	}{
		{"a symlinked socket directory", "q", "too many levels of symbolic links"},
		{"a pod UID with ..", types.UID("../" + filepath.Base(outside)), "cross-device link"},
		{"no pod", "", "file does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := socketDir{podsDir: d.podsDir, podUID: tc.uid}.dial(ctx, vmispec.ControlSocket)
			assert.ErrorContains(t, err, tc.msg)
		})
	}
}

// The migration socket is handed to the launcher's user after bind, in a
// directory the launcher writes: it is made in the pod's directory, given
// to that user only, and a symlink or hard link to a file of root's left
// in its place is replaced, never followed.
func TestSocketDirListenHandsTheSocketToTheLauncher(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand a socket to another user")
	}
	d, dir := testSocketDir(t)
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("root's"), 0o640))
	for _, planted := range []func(string) error{
		func(p string) error { return os.Symlink(secret, p) },
		func(p string) error { return os.Link(secret, p) },
	} {
		sock := filepath.Join(dir, vmispec.MigrationOutSocket)
		require.NoError(t, planted(sock))
		l, err := d.listen(vmispec.MigrationOutSocket, launcherUID, launcherUID)
		require.NoError(t, err)
		st, err := os.Lstat(sock)
		require.NoError(t, err)
		assert.Equal(t, os.ModeSocket, st.Mode().Type())
		assert.Equal(t, uint32(launcherUID), owner(t, sock))
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		l.Close()
		d.remove(vmispec.MigrationOutSocket)
	}
	st, err := os.Stat(secret)
	require.NoError(t, err)
	assert.Equal(t, uint32(0), st.Sys().(*syscall.Stat_t).Uid)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
}
