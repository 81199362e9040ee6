package api

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// volumeFileServer serves volume file requests with attach on a fresh
// socket and returns a dialer.
func volumeFileServer(t *testing.T, attach AttachFile) func() *net.UnixConn {
	path := filepath.Join(t.TempDir(), "hotplug.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- ServeVolumeFiles(l, attach) }()
	t.Cleanup(func() {
		_ = l.Close()
		assert.NoError(t, <-done)
	})
	return func() *net.UnixConn {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

func TestSendVolumeFile(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(img, []byte("the image"), 0o600))
	got := make(chan *os.File, 1)
	dial := volumeFileServer(t, func(r VolumeRequest, f *os.File) (Volume, error) {
		got <- f
		return Volume{Name: r.Name, Path: f.Name(), Format: "raw", Target: 2, SizeBytes: 9}, nil
	})
	f, err := os.Open(img)
	require.NoError(t, err)
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := SendVolumeFile(ctx, dial(), VolumeRequest{Name: "hp", Path: "/ignored"}, f)
	require.NoError(t, err)
	assert.Equal(t, "hp", v.Name)
	assert.Equal(t, 2, v.Target)
	// The server holds its own descriptor of the same file.
	sf := <-got
	defer sf.Close()
	b := make([]byte, 9)
	_, err = sf.ReadAt(b, 0)
	require.NoError(t, err)
	assert.Equal(t, "the image", string(b))
}

func TestServeVolumeFileRefuses(t *testing.T) {
	dial := volumeFileServer(t, func(r VolumeRequest, f *os.File) (Volume, error) {
		t.Errorf("attach called for %+v", r)
		_ = f.Close()
		return Volume{}, nil
	})
	img := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	file, err := os.Open(img)
	require.NoError(t, err)
	defer file.Close()
	dir, err := os.Open(t.TempDir())
	require.NoError(t, err)
	defer dir.Close()
	rights := func(fs ...*os.File) []byte {
		var fds []int
		for _, f := range fs {
			fds = append(fds, int(f.Fd()))
		}
		if len(fds) == 0 {
			return nil
		}
		return unix.UnixRights(fds...)
	}
	for _, tc := range []struct {
		name string
		body string
		oob  []byte
		want string
	}{
		{"no descriptor", `{"name":"a"}`, nil, "0 descriptors sent, one expected"},
		{"two descriptors", `{"name":"a"}`, rights(file, file), "2 descriptors sent, one expected"},
		{"a directory", `{"name":"a"}`, rights(dir), "no regular file nor block device"},
		{"no name", `{}`, rights(file), `a volume needs a "name"`},
		{"not JSON", `{"name":`, rights(file), "the request:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial()
			_, _, err := c.WriteMsgUnix([]byte(tc.body), tc.oob, nil)
			require.NoError(t, err)
			require.NoError(t, c.CloseWrite())
			var rep VolumeFileReply
			b := make([]byte, 4096)
			n, _ := c.Read(b)
			require.NoError(t, json.Unmarshal(b[:n], &rep))
			assert.Nil(t, rep.Volume)
			assert.Contains(t, rep.Error, tc.want)
		})
	}
}
