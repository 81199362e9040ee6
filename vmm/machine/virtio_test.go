package machine

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every device reports its own counters and its transport's, by one
// naming scheme, and its state goes through the Device interface: a
// restored machine takes it back, and a device state of another version
// is refused naming the device.
func TestVirtioDevicesBehindTheInterface(t *testing.T) {
	m, header, state := savedVM(t)
	require.Len(t, m.Virtio(), 1)
	c := m.Virtio()[0].Metrics()
	for _, k := range []string{"requests", "bytes", "malformed_chains", "source_errors",
		"transport_activations", "transport_resets", "transport_bad_accesses", "transport_interrupts"} {
		assert.Contains(t, c, k)
	}

	in := NewIncoming(Config{})
	_, err := in.Prepare(header)
	require.NoError(t, err)
	defer in.Discard()
	require.NoError(t, in.Restore(state))

	bad := edit(t, state, func(s map[string]any) {
		dev := s["virtio"].([]any)[0].(map[string]any)
		dev["device"] = json.RawMessage(`{"Version":99}`)
	})
	in2 := NewIncoming(Config{})
	_, err = in2.Prepare(header)
	require.NoError(t, err)
	defer in2.Discard()
	assert.ErrorContains(t, in2.Restore(bad), "rng0: virtio-rng state version 99")
}
