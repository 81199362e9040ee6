package net_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	vnet "github.com/kubevmm/kubevmm/vmm/virtio/net"
)

// The status field (virtio_net_config.status, offset 6) is what the guest
// driver reads for the carrier when VIRTIO_NET_F_STATUS is offered: a VMI
// interface with state: down must read as link down, every other as up.
func TestLinkStatus(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name     string
		down     bool
		wantLink byte
	}{{"up", false, 1}, {"down", true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := vnet.New(vnet.Config{Tap: e.tap, MAC: guestMAC, LinkDown: tc.down})
			require.NoError(t, err)
			require.NotZero(t, d.Features()&vnet.FStatus, "the status feature is offered")
			status := make([]byte, 2)
			d.ReadConfig(6, status)
			assert.Equal(t, tc.wantLink, status[0]&1, "VIRTIO_NET_S_LINK_UP")
			mac := make([]byte, 6)
			d.ReadConfig(0, mac)
			assert.Equal(t, []byte(guestMAC), mac)
		})
	}
}
