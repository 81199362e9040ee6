package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/storage/cdi/registry"
	"github.com/kubevmm/kubevmm/test/registrytest"
)

func TestPush(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{Username: "u", Password: "p"})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(ca, reg.CA, 0o600))
	disk := filepath.Join(dir, "guest.qcow2")
	want := bytes.Repeat([]byte("kubevmm"), 100000)
	require.NoError(t, os.WriteFile(disk, want, 0o600))
	t.Setenv("REGISTRY_USERNAME", "u")
	t.Setenv("REGISTRY_PASSWORD", "p")

	require.NoError(t, run([]string{"-ca", ca, disk, reg.Addr + "/kubevmm/guest:v1"}))

	c, err := registry.New(registry.Options{CAs: [][]byte{reg.CA}, Username: "u", Password: "p"})
	require.NoError(t, err)
	ref, err := registry.ParseImage(reg.Addr + "/kubevmm/guest:v1")
	require.NoError(t, err)
	var name string
	var got []byte
	require.NoError(t, c.Disk(context.Background(), ref, func(n string, _ int64, r io.Reader) error {
		name = n
		got, err = io.ReadAll(r)
		return err
	}))
	assert.Equal(t, "guest.qcow2", name)
	assert.Equal(t, want, got)

	for _, bad := range [][]string{
		{disk},
		{disk, "docker://nohost"},
		{"-ca", filepath.Join(dir, "missing"), disk, reg.Addr + "/x:1"},
		{filepath.Join(dir, "missing.qcow2"), reg.Addr + "/x:1"},
		{"-name", "a/b", disk, reg.Addr + "/x:1"},
		{disk, reg.Addr + "/x@sha256:" + string(bytes.Repeat([]byte("a"), 64))},
	} {
		assert.Error(t, run(bad), "%q", bad)
	}
}
