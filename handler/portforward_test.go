package handler

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/kubevmm/kubevmm/net/link"
)

// dialInNetns reaches a server that exists only in another network
// namespace (as the guest's port exists only behind the launcher pod's
// tap), and the connection carries bytes both ways.
func TestDialInNetns(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	name := fmt.Sprintf("kvpf-%d", os.Getpid()%100000)
	ns, err := link.NewNetns(name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ns.Delete() })
	h, err := ns.Handle()
	require.NoError(t, err)
	defer h.Close()
	lo, err := h.LinkByName("lo")
	require.NoError(t, err)
	require.NoError(t, h.LinkSetUp(lo))

	var ln net.Listener
	require.NoError(t, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Says where it runs, then echoes.
		if _, err := io.WriteString(c, "in "+name+"\n"); err == nil {
			_, _ = io.Copy(c, c)
		}
	}()

	handle, err := netns.GetFromName(name)
	require.NoError(t, err)
	defer handle.Close()
	conn, err := dialInNetns(handle, ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "in "+name+"\n", line)
	_, err = io.WriteString(conn, "ping\n")
	require.NoError(t, err)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "ping\n", line)

	// Nothing else listens in that namespace: another port is refused,
	// and the error says where.
	port := ln.Addr().(*net.TCPAddr).Port%65535 + 1
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	_, err = dialInNetns(handle, addr)
	assert.ErrorContains(t, err, "connecting to the guest's "+addr)
}
