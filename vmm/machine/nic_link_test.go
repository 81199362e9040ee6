package machine

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A NIC's link state travels in the saved configuration, so a migrated or
// restored guest still sees the link as it was (a VMI's state: down); a
// state saved before it existed has every link up.
func TestSavedNICLinkDown(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	m := &Machine{cfg: Config{CPUs: 1, MemoryBytes: 64 << 20, NICs: []NICConfig{{Tap: "tap0", MAC: mac}, {Tap: "tap1", MAC: mac, LinkDown: true}}}}
	b, err := json.Marshal(m.savedConfig())
	require.NoError(t, err)
	var back SavedConfig
	require.NoError(t, json.Unmarshal(b, &back))
	c, err := configFrom(back, Config{})
	require.NoError(t, err)
	require.Len(t, c.NICs, 2)
	assert.Equal(t, []bool{false, true}, []bool{c.NICs[0].LinkDown, c.NICs[1].LinkDown})

	var old SavedConfig
	require.NoError(t, json.Unmarshal([]byte(`{"cpus":1,"memory_bytes":67108864,"nics":[{"tap":"tap0","mac":"02:00:00:00:00:01"}]}`), &old))
	c, err = configFrom(old, Config{})
	require.NoError(t, err)
	assert.False(t, c.NICs[0].LinkDown)
}
