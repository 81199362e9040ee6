package link_test

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/net/tap"
)

func TestNetnsBridgeAndMove(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	id := os.Getpid() % 100000
	ns, err := link.NewNetns(fmt.Sprintf("kvlink-%d", id))
	require.NoError(t, err)
	defer ns.Delete()

	// a tap made here, moved into the namespace, bridged there
	name := fmt.Sprintf("kvd%d", id)
	tp, err := tap.Open(name)
	require.NoError(t, err)
	defer tp.Close()
	require.NoError(t, link.MoveTo(name, ns))
	_, err = netlink.LinkByName(name)
	assert.Error(t, err, "gone from our namespace")

	h, err := ns.Handle()
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, link.EnsureBridge(h, "br0"))
	require.NoError(t, link.EnsureBridge(h, "br0"), "idempotent")
	require.NoError(t, link.Attach(h, name, "br0"))
	require.NoError(t, link.Up(h, "br0", "10.198.0.1/24"))
	l, err := h.LinkByName(name)
	require.NoError(t, err)
	br, err := h.LinkByName("br0")
	require.NoError(t, err)
	assert.Equal(t, br.Attrs().Index, l.Attrs().MasterIndex)

	// sockets opened in Do live in the namespace
	var addr string
	require.NoError(t, ns.Do(func() error {
		ln, err := net.Listen("tcp4", "10.198.0.1:0")
		if err != nil {
			return err
		}
		addr = ln.Addr().String()
		return ln.Close()
	}))
	assert.Contains(t, addr, "10.198.0.1:")
}

func TestParseMAC(t *testing.T) {
	m, err := link.ParseMAC("52:54:00:12:34:56")
	require.NoError(t, err)
	assert.Equal(t, "52:54:00:12:34:56", m.String())
	for _, bad := range []string{"", "zz:54:00:12:34:56", "01:00:5e:00:00:01", "00:00:00:00:00:00:00:01"} {
		_, err := link.ParseMAC(bad)
		assert.Error(t, err, bad)
	}
}
