package event_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/virtio/event"
)

func TestLoopDispatchesAndStops(t *testing.T) {
	l, err := event.NewLoop()
	require.NoError(t, err)
	fd, err := event.NewFD()
	require.NoError(t, err)
	defer fd.Close()
	got := make(chan int, 10)
	n := 0
	require.NoError(t, l.Add(fd.Int(), unix.EPOLLIN, func(uint32) {
		fd.Drain()
		n++
		got <- n
	}))
	l.Start()
	require.NoError(t, fd.Signal())
	assert.Equal(t, 1, <-got)
	require.NoError(t, fd.Signal())
	assert.Equal(t, 2, <-got)
	var seen int
	l.Do(func() { seen = n }) // runs while no handler does
	assert.Equal(t, 2, seen)
	l.Stop()
	assert.False(t, fd.Drain(), "nothing pending after the handler drained it")
}

func TestFDSignalAccumulates(t *testing.T) {
	fd, err := event.NewFD()
	require.NoError(t, err)
	defer fd.Close()
	assert.False(t, fd.Drain())
	fd.Signal()
	fd.Signal()
	assert.True(t, fd.Drain())
	assert.False(t, fd.Drain())
	require.NoError(t, fd.Close())
	require.NoError(t, fd.Close(), "closing twice is harmless")
}
