package api_test

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
)

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in, network, addr, err string
	}{
		{in: "tcp:127.0.0.1:4444", network: "tcp", addr: "127.0.0.1:4444"},
		{in: "tcp:[::1]:0", network: "tcp", addr: "[::1]:0"},
		{in: "unix:/run/mig.sock", network: "unix", addr: "/run/mig.sock"},
		{in: "tcp:4444", err: "missing port"},
		{in: "unix:", err: "want tcp:HOST:PORT or unix:PATH"},
		{in: "/run/mig.sock", err: "want tcp:HOST:PORT or unix:PATH"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			network, addr, err := api.ParseAddress(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.network, network)
			assert.Equal(t, tc.addr, addr)
		})
	}
}

func TestListenAddress(t *testing.T) {
	l, err := api.ListenAddress("tcp:127.0.0.1:0")
	require.NoError(t, err)
	l.Close()

	path := filepath.Join(t.TempDir(), "mig.sock")
	l, err = api.ListenAddress("unix:" + path)
	require.NoError(t, err)
	defer l.Close()
	_, err = api.ListenAddress("unix:" + path)
	assert.ErrorContains(t, err, "another process serves this socket", "a live target's socket is not taken over")
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	c.Close()

	_, err = api.ListenAddress("udp:1.2.3.4:5")
	assert.Error(t, err)
}
