package blk_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/blk"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/virtiotest"
)

// BenchmarkRequest measures the VMM side of the data path alone: a 1 MiB
// request in 256 page-sized segments (as Linux sends it), kicked through an
// eventfd, served by the worker, completed through the used ring.
func BenchmarkRequest(b *testing.B) {
	for _, tc := range []struct {
		name string
		typ  uint32
	}{{"read", blk.TypeIn}, {"write", blk.TypeOut}} {
		b.Run(tc.name+" 1MiB", func(b *testing.B) {
			p := filepath.Join(b.TempDir(), "disk.raw")
			require.NoError(b, os.WriteFile(p, nil, 0o644))
			require.NoError(b, os.Truncate(p, 64<<20))
			disk, err := block.OpenRaw(p, false)
			require.NoError(b, err)
			defer disk.Close()
			dev, err := blk.New(blk.Config{Disk: disk})
			require.NoError(b, err)
			h := virtiotest.Activate(b, dev, virtio.FVersion1|virtio.FRingIndirectDesc|virtio.FRingEventIdx)
			q := h.Queues[0]
			bufs := []queuetest.Buf{{Data: hdr(tc.typ, 0)}}
			for i := 0; i < 256; i++ {
				if tc.typ == blk.TypeIn {
					bufs = append(bufs, queuetest.Buf{Write: true, Len: 4096})
				} else {
					bufs = append(bufs, queuetest.Buf{Data: make([]byte, 4096)})
				}
			}
			bufs = append(bufs, queuetest.Buf{Write: true, Len: 1})
			b.SetBytes(1 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				q.AddIndirect(bufs...)
				h.WaitUsed(0, 1, true)
			}
		})
	}
}
