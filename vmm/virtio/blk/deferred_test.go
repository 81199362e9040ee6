package blk_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
)

// A migration target builds the device on a disk it opens later; the
// guest must find the same device as on the source, which had it open.
func TestDeviceOnDeferredDiskIsTheSame(t *testing.T) {
	for _, ro := range []bool{false, true} {
		path, open := newDisk(t, ro)
		src, err := blk.New(blk.Config{Disk: open, Serial: "s"})
		require.NoError(t, err)
		dst, err := blk.New(blk.Config{Disk: block.NewDeferred(path, block.Options{ReadOnly: ro}, open.Size()), Serial: "s"})
		require.NoError(t, err)
		assert.Equal(t, src.Features(), dst.Features())
		assert.Equal(t, src.Sectors(), dst.Sectors())
		require.NoError(t, dst.Restore(src.Save()))
	}
}
