package blk_test

import (
	"fmt"
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

// BenchmarkRequest measures the VMM side of the data path alone, without
// a guest: requests in page-sized segments (as Linux sends them, in an
// indirect table), depth of them kicked at once through the notify
// eventfd, served by the worker against a raw file in the page cache,
// completed through the used ring. It reports the device's CPU per MiB
// and per request (virtiotest.CPU: the driver's thread is not counted).
func BenchmarkRequest(b *testing.B) {
	for _, tc := range []struct {
		name         string
		typ          uint32
		pages, depth int
	}{
		{"read", blk.TypeIn, 256, 1},
		{"write", blk.TypeOut, 256, 1},
		{"read", blk.TypeIn, 1, 32},
		{"write", blk.TypeOut, 1, 32},
	} {
		b.Run(fmt.Sprintf("%s %dKiB depth %d", tc.name, 4*tc.pages, tc.depth), func(b *testing.B) {
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
			reqs := make([][]queuetest.Buf, tc.depth)
			for r := range reqs {
				bufs := []queuetest.Buf{{Data: hdr(tc.typ, uint64(r*tc.pages*8))}}
				for i := 0; i < tc.pages; i++ {
					if tc.typ == blk.TypeIn {
						bufs = append(bufs, queuetest.Buf{Write: true, Len: 4096})
					} else {
						bufs = append(bufs, queuetest.Buf{Data: make([]byte, 4096)})
					}
				}
				reqs[r] = append(bufs, queuetest.Buf{Write: true, Len: 1})
			}
			b.ResetTimer()
			cpu := virtiotest.StartCPU(b)
			for done := 0; done < b.N; {
				k := min(tc.depth, b.N-done)
				old := q.AvailIdx()
				for _, r := range reqs[:k] {
					q.AddIndirect(r...)
				}
				if q.NeedsKick(old, true) {
					h.Kick(0)
				}
				for got := 0; got < k; {
					if _, _, ok := q.Used(); ok {
						got++
						continue
					}
					h.WaitInterrupt()
				}
				done += k
			}
			used := cpu.Stop(b)
			b.StopTimer()
			virtiotest.ReportCPU(b, used, int64(b.N)*int64(tc.pages)*4096, b.N)
		})
	}
}
