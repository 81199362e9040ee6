package handler

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/net/tap"
)

// The tap virt-handler creates for a NIC is the kind the launcher opens:
// a single-queue tap for one queue pair, a multi-queue tap for several
// (networkInterfaceMultiqueue), whose queues open one per pair. Each
// kind refuses to open as the other, so a mismatch would fail the VM.
func TestCreateTapQueues(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for tap devices and network namespaces")
	}
	ns, err := link.NewNetns(fmt.Sprintf("kvmtest-h%d", os.Getpid()%100000))
	require.NoError(t, err)
	t.Cleanup(func() { ns.Delete() })
	for _, tc := range []struct {
		name   string
		queues int
	}{{"tap0", 1}, {"tap1", 2}, {"tap2", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			// Results, not assertions, come out of ns.Do: a failing require
			// would leave this thread in the namespace.
			var asIs, asOther error
			require.NoError(t, ns.Do(func() error {
				if err := createTap(tc.name, 107, tc.queues); err != nil {
					return err
				}
				open, other := func() error { return openTap(tc.name, 1) }, func() error { return openTap(tc.name, 2) }
				if tc.queues > 1 {
					open, other = func() error { return openTap(tc.name, tc.queues) }, func() error { return openTap(tc.name, 1) }
				}
				asIs, asOther = open(), other()
				return nil
			}))
			assert.NoError(t, asIs, "the launcher opens the tap as created")
			assert.Error(t, asOther, "the tap does not open as the other kind")
			h, err := ns.Handle()
			require.NoError(t, err)
			defer h.Close()
			_, err = h.LinkByName(tc.name)
			assert.NoError(t, err, "the tap persists with no queue open")
		})
	}
}

// openTap opens name as the VMM does for a NIC of queues pairs, and closes it.
func openTap(name string, queues int) error {
	var ts []*tap.Tap
	var err error
	if queues > 1 {
		ts, err = tap.OpenQueues(name, queues)
	} else {
		var t *tap.Tap
		t, err = tap.Open(name)
		ts = []*tap.Tap{t}
	}
	if err != nil {
		return err
	}
	for _, t := range ts {
		t.Close()
	}
	return nil
}
