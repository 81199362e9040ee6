package tap_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kubevmm/kubevmm/net/tap"
)

func TestOpen(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for tap devices")
	}
	name := fmt.Sprintf("kvtap%d", os.Getpid()%10000)
	tp, err := tap.Open(name)
	require.NoError(t, err)
	assert.Equal(t, name, tp.Name())
	l, err := netlink.LinkByName(name)
	require.NoError(t, err)
	assert.Equal(t, "tuntap", l.Type())
	require.NoError(t, tp.SetOffload(tap.OffloadCsum|tap.OffloadTSO4|tap.OffloadTSO6))
	assert.Error(t, tp.SetOffload(tap.OffloadTSO4|0x4000), "unknown offload bits are refused")
	require.NoError(t, tp.Close())
	require.NoError(t, tp.Close())
	_, err = netlink.LinkByName(name)
	assert.Error(t, err, "a tap the VMM created goes away with it")
}

func TestOpenBadName(t *testing.T) {
	for _, n := range []string{"", "a-name-that-is-too-long"} {
		_, err := tap.Open(n)
		assert.Error(t, err, n)
	}
}

func TestOpenQueues(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for tap devices")
	}
	name := fmt.Sprintf("kvmq%d", os.Getpid()%10000)
	ts, err := tap.OpenQueues(name, 3)
	require.NoError(t, err)
	defer func() {
		for _, q := range ts {
			q.Close()
		}
	}()
	require.Len(t, ts, 3)
	l, err := netlink.LinkByName(name)
	require.NoError(t, err)
	tt, ok := l.(*netlink.Tuntap)
	require.True(t, ok)
	assert.NotZero(t, tt.Flags&netlink.TUNTAP_MULTI_QUEUE, "a multi-queue tap")
	_, err = tap.Open(name)
	assert.Error(t, err, "a single-queue open of a multi-queue tap is refused")

	require.NoError(t, ts[1].SetQueueEnabled(false))
	assert.Error(t, ts[1].SetQueueEnabled(false), "detached already")
	require.NoError(t, ts[1].SetQueueEnabled(true))
	_, err = tap.OpenQueues(name, 0)
	assert.Error(t, err)
}
