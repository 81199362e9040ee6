package handler

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// A guest's byte counts are its own word: one past int's range reads as
// the largest int in the VMI's status, never as a negative size.
func TestFilesystemsClampTheGuestsCounts(t *testing.T) {
	huge, small := uint64(math.MaxUint64), uint64(4096)
	got := filesystems([]ga.Filesystem{{Name: "vda", Mountpoint: "/", Type: "ext4", UsedBytes: &huge, TotalBytes: &small}})
	assert.Equal(t, math.MaxInt, got[0].UsedBytes)
	assert.Equal(t, 4096, got[0].TotalBytes)
}
