package bus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type recorder struct {
	reads, writes []uint64
}

func (r *recorder) Read(off uint64, data []byte) {
	r.reads = append(r.reads, off)
	for i := range data {
		data[i] = byte(off) + byte(i)
	}
}

func (r *recorder) Write(off uint64, data []byte) { r.writes = append(r.writes, off) }

func TestDispatchByRange(t *testing.T) {
	var b Bus
	uart, rtc := &recorder{}, &recorder{}
	require.NoError(t, b.Insert("uart", 0x3f8, 8, uart))
	require.NoError(t, b.Insert("rtc", 0x70, 2, rtc))

	data := make([]byte, 1)
	assert.True(t, b.Read(0x3fd, data))
	assert.Equal(t, []uint64{5}, uart.reads, "offsets are relative to the base")
	assert.True(t, b.Write(0x71, data))
	assert.Equal(t, []uint64{1}, rtc.writes)

	assert.False(t, b.Read(0x3f7, data), "below the range")
	assert.False(t, b.Read(0x400, data), "above the range")
	assert.False(t, b.Read(0x3ff, make([]byte, 2)), "an access straddling the end belongs to nobody")
	assert.False(t, b.Write(0, data))
}

func TestInsertRefusesOverlapAndEmptyRanges(t *testing.T) {
	var b Bus
	require.NoError(t, b.Insert("a", 0x100, 0x10, &recorder{}))
	for _, tc := range []struct {
		base, size uint64
	}{{0x108, 0x10}, {0xf8, 0x10}, {0x100, 1}, {0x0, 0x1000}} {
		assert.Error(t, b.Insert("b", tc.base, tc.size, &recorder{}), "%#x+%#x", tc.base, tc.size)
	}
	assert.Error(t, b.Insert("empty", 0x200, 0, &recorder{}))
	assert.Error(t, b.Insert("wrap", ^uint64(0), 2, &recorder{}))
	require.NoError(t, b.Insert("adjacent", 0x110, 0x10, &recorder{}), "touching ranges don't overlap")

	b.Remove(0x100)
	assert.False(t, b.Read(0x100, make([]byte, 1)))
	require.NoError(t, b.Insert("again", 0x100, 0x10, &recorder{}))
}
