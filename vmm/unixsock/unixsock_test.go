package unixsock_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/unixsock"
)

func TestListen(t *testing.T) {
	dir := t.TempDir()

	t.Run("fresh path", func(t *testing.T) {
		l, err := unixsock.Listen(filepath.Join(dir, "fresh"))
		require.NoError(t, err)
		l.Close()
	})

	t.Run("a stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(dir, "stale")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		require.NoError(t, err)
		old.SetUnlinkOnClose(false) // as if its process had died
		old.Close()
		l, err := unixsock.Listen(path)
		require.NoError(t, err)
		defer l.Close()
		c, err := net.Dial("unix", path)
		require.NoError(t, err)
		c.Close()
	})

	t.Run("a live socket is not taken over", func(t *testing.T) {
		path := filepath.Join(dir, "live")
		live, err := net.Listen("unix", path)
		require.NoError(t, err)
		defer live.Close()
		_, err = unixsock.Listen(path)
		require.ErrorContains(t, err, "another process serves this socket")
		c, err := net.Dial("unix", path)
		require.NoError(t, err, "the original listener still has its socket")
		c.Close()
	})

	t.Run("a regular file is left alone", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		require.NoError(t, os.WriteFile(path, []byte("data"), 0o600))
		_, err := unixsock.Listen(path)
		require.Error(t, err)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "data", string(b))
	})
}
