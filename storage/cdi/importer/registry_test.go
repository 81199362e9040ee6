package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
	"github.com/kubevmm/kubevmm/storage/cdi/registry"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/test/registrytest"
)

// A containerDisk with a qcow2 inside, from a real registry: pullMethod
// pod pulls it into the scratch space and the PVC gets what qemu-img
// convert makes of it; pullMethod node reads it from the image's /disk/
// (here a directory standing for the image the kubelet pulled).
func TestImportRegistry(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{Username: "u", Password: "p"})
	dir := t.TempDir()
	rawPath, _ := rawImage(t, dir)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	converted := filepath.Join(dir, "converted.raw")
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", qcowPath, converted)
	want, err := os.ReadFile(converted)
	require.NoError(t, err)

	c, err := registry.New(registry.Options{CAs: [][]byte{reg.CA}, Username: "u", Password: "p"})
	require.NoError(t, err)
	src, err := os.Open(qcowPath)
	require.NoError(t, err)
	defer src.Close()
	url := "docker://" + reg.Addr + "/kubevmm/guest:v1"
	ref, err := registry.ParseURL(url)
	require.NoError(t, err)
	_, err = c.PushContainerDisk(context.Background(), ref, "disk.qcow2", src)
	require.NoError(t, err)

	ropts := func(t *testing.T, url string) importer.Options {
		o := opts(t, url, 16*mib)
		o.Source, o.AccessKey, o.SecretKey, o.CAs = importer.SourceRegistry, "u", "p", [][]byte{reg.CA}
		o.Registry = importer.RegistryOptions{PullMethod: "pod", Timeout: 5 * time.Second}
		return o
	}
	check := func(t *testing.T, o importer.Options) {
		got, err := os.ReadFile(filepath.Join(o.DataDir, importer.DiskImage))
		require.NoError(t, err)
		require.Len(t, got, 15*mib, "grown to 16 MiB less 6%, in whole MiB")
		assert.True(t, bytes.Equal(want, got[:len(want)]), "disk.img starts with qemu-img convert's bytes")
		assert.True(t, bytes.Equal(make([]byte, len(got)-len(want)), got[len(want):]), "and reads zeros after them")
	}

	t.Run("pod", func(t *testing.T) {
		o := ropts(t, url)
		require.NoError(t, importer.Run(context.Background(), o))
		check(t, o)
		assert.InDelta(t, 100, o.Progress.Get(), 0.001)
		left, err := os.ReadDir(o.ScratchDir)
		require.NoError(t, err)
		assert.Empty(t, left, "the scratch space is emptied")
	})
	t.Run("insecure", func(t *testing.T) {
		o := ropts(t, url)
		o.CAs, o.Registry.Insecure = nil, true
		require.NoError(t, importer.Run(context.Background(), o))
		check(t, o)
	})
	t.Run("node", func(t *testing.T) {
		o := ropts(t, url)
		o.Registry.PullMethod = "node"
		o.Registry.DiskDir = filepath.Join(t.TempDir(), "disk")
		require.NoError(t, os.Mkdir(o.Registry.DiskDir, 0o755))
		require.NoError(t, os.Link(qcowPath, filepath.Join(o.Registry.DiskDir, "disk.qcow2")))
		require.NoError(t, importer.Run(context.Background(), o))
		check(t, o)
		_, err := os.Stat(filepath.Join(o.Registry.DiskDir, "disk.qcow2"))
		require.NoError(t, err, "the image's own disk is left alone")
	})
	t.Run("node, disk unreadable by 107", func(t *testing.T) {
		// As the pod's user 107 would: this thread's filesystem user is
		// 107 (which drops root's file capabilities) while the importer
		// runs. The thread stays locked: the goroutine's end retires it.
		base, err := os.MkdirTemp("", "importer-unreadable")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(base) })
		o := ropts(t, url)
		o.Registry.PullMethod = "node"
		o.DataDir, o.Registry.DiskDir = filepath.Join(base, "data"), filepath.Join(base, "disk")
		for _, d := range []string{base, o.DataDir, o.Registry.DiskDir} {
			require.NoError(t, os.MkdirAll(d, 0o755))
			require.NoError(t, os.Chmod(d, 0o777))
		}
		b, err := os.ReadFile(qcowPath)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(o.Registry.DiskDir, "disk.qcow2"), b, 0o400))
		runtime.LockOSThread()
		prev, err := unix.SetfsuidRetUid(podsecurity.UID)
		require.NoError(t, err)
		defer func() { _, _ = unix.SetfsuidRetUid(prev) }() // before the cleanups, which run on this thread
		now, err := unix.SetfsuidRetUid(-1)
		require.NoError(t, err)
		require.Equal(t, podsecurity.UID, now, "the thread's filesystem user")
		err = importer.Run(context.Background(), o)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the importer cannot read its disk (a containerDisk's disk must be readable by user 107")
		assert.ErrorIs(t, err, os.ErrPermission)
	})
	for _, tc := range []struct {
		name, url, wantErr string
		edit               func(*importer.Options)
	}{
		{"unknown image", "docker://" + reg.Addr + "/kubevmm/nothere:v1", "not found", nil},
		{"wrong credentials", url, "unauthorized", func(o *importer.Options) { o.SecretKey = "x" }},
		{"untrusted", url, "certificate", func(o *importer.Options) { o.CAs = nil }},
		{"insecure, wrong credentials", url, "unauthorized", func(o *importer.Options) { o.CAs, o.Registry.Insecure, o.SecretKey = nil, true, "x" }},
		{"unreachable", "docker://127.0.0.1:1/kubevmm/guest:v1", "connection refused", nil},
		{"bad url", "docker://nohost", "no registry host", nil},
		{"node without disk", url, "no disk image under disk/", func(o *importer.Options) {
			o.Registry.PullMethod, o.Registry.DiskDir = "node", t.TempDir()
		}},
		{"bad method", url, `pull method "kubelet"`, func(o *importer.Options) { o.Registry.PullMethod = "kubelet" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ropts(t, tc.url)
			if tc.edit != nil {
				tc.edit(&o)
			}
			err := importer.Run(context.Background(), o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
