package machine

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

// savedVM is a real machine's migration header and state, the input the
// variants below start from.
func savedVM(t testing.TB) (m *Machine, header, state []byte) {
	t.Helper()
	m, err := New(Config{CPUs: 1, MemoryBytes: 64 << 20, Kernel: counterKernel, RNG: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	header, err = m.Header()
	require.NoError(t, err)
	state, err = m.State()
	require.NoError(t, err)
	return m, header, state
}

// edit returns a copy of the JSON document b changed by f.
func edit(t testing.TB, b []byte, f func(map[string]any)) []byte {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v))
	f(v)
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

func vcpu0(s map[string]any) map[string]any { return s["vcpus"].([]any)[0].(map[string]any) }

// badStates are states a migration source or an edited state.json could
// present: each must be refused with an error, never crash the VMM.
var badStates = []struct {
	name string
	edit func(s map[string]any)
	want string
}{
	{"vcpu entry null", func(s map[string]any) { s["vcpus"] = []any{nil} }, "vCPU 0: no state"},
	{"no vcpus", func(s map[string]any) { s["vcpus"] = []any{} }, "0 vCPUs"},
	{"more vcpus than configured", func(s map[string]any) {
		s["vcpus"] = append(s["vcpus"].([]any), s["vcpus"].([]any)[0])
	}, "2 vCPUs"},
	{"vcpu id out of place", func(s map[string]any) { vcpu0(s)["id"] = 5 }, "state is for vCPU 5"},
	{"regs truncated", func(s map[string]any) { vcpu0(s)["regs"] = "AAAA" }, "regs state is 3 bytes"},
	{"no lapic", func(s map[string]any) { delete(vcpu0(s), "lapic") }, "lapic state is 0 bytes"},
	{"no cpuid", func(s map[string]any) { vcpu0(s)["cpuid"] = nil }, "0 CPUID leaves"},
	{"too many msrs", func(s map[string]any) {
		msrs := make([]any, 300)
		for i := range msrs {
			msrs[i] = map[string]any{"index": 0x10}
		}
		vcpu0(s)["msrs"] = msrs
	}, "300 MSRs"},
	{"vm section null", func(s map[string]any) { s["vm"] = nil }, "no irqchip"},
	{"pit missing", func(s map[string]any) { delete(s["vm"].(map[string]any), "pit") }, "PIT state is 0 bytes"},
	{"unknown state version", func(s map[string]any) { s["version"] = 99 }, "version 99"},
	{"virtio entry null", func(s map[string]any) { s["virtio"] = []any{nil} }, "virtio device 0"},
	{"virtio device state of unknown version", func(s map[string]any) {
		s["virtio"].([]any)[0].(map[string]any)["device"] = map[string]any{"Version": 7}
	}, "virtio-rng state version 7"},
	{"virtio queue outside guest RAM", func(s map[string]any) {
		tr := s["virtio"].([]any)[0].(map[string]any)["transport"].(map[string]any)
		tr["Active"] = []any{map[string]any{"Config": map[string]any{"Size": 8, "Ready": true, "DescTable": 1 << 40, "AvailRing": 0, "UsedRing": 4096}}}
	}, "queue 0"},
	{"cpus zero", func(s map[string]any) { s["config"].(map[string]any)["cpus"] = 0 }, "0 vCPUs"},
}

func TestIncomingRefusesBadStates(t *testing.T) {
	_, header, state := savedVM(t)
	for _, tc := range badStates {
		t.Run(tc.name, func(t *testing.T) {
			in := NewIncoming(Config{})
			_, err := in.Prepare(header)
			require.NoError(t, err)
			defer in.Discard()
			err = in.Restore(edit(t, state, tc.edit))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("state of another VM than the header's", func(t *testing.T) {
		in := NewIncoming(Config{})
		_, err := in.Prepare(header)
		require.NoError(t, err)
		defer in.Discard()
		err = in.Restore(edit(t, state, func(s map[string]any) { s["config"].(map[string]any)["rng"] = false }))
		assert.ErrorContains(t, err, "another VM")
	})
	t.Run("the good state loads", func(t *testing.T) {
		in := NewIncoming(Config{})
		_, err := in.Prepare(header)
		require.NoError(t, err)
		defer in.Discard()
		assert.NoError(t, in.Restore(state))
	})
}

func TestIncomingRefusesBadHeaders(t *testing.T) {
	_, header, _ := savedVM(t)
	for _, tc := range []struct {
		name string
		edit func(h map[string]any)
		want string
	}{
		{"no vcpus", func(h map[string]any) { h["cpus"] = 0 }, "0 vCPUs"},
		{"too many vcpus", func(h map[string]any) { h["cpus"] = 100000 }, "100000 vCPUs"},
		{"more RAM than a VM may have", func(h map[string]any) { h["memory_bytes"] = uint64(maxMemory) * 2 }, "more than"},
		{"RAM not whole pages", func(h map[string]any) { h["memory_bytes"] = 64<<20 + 1 }, "not a multiple"},
		{"too many devices", func(h map[string]any) {
			disks := make([]any, 20)
			for i := range disks {
				disks[i] = map[string]any{"Path": "/nonexistent"}
			}
			h["disks"] = disks
		}, "21 virtio devices"},
		{"disk without a path", func(h map[string]any) { h["disks"] = []any{map[string]any{}} }, "disk 0 has no path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := NewIncoming(Config{})
			mem, err := in.Prepare(edit(t, header, tc.edit))
			require.Error(t, err)
			assert.Nil(t, mem)
			assert.Nil(t, in.Machine)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestRestoreRefusesBadSnapshotStates(t *testing.T) {
	m, _, state := savedVM(t)
	for _, tc := range badStates {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := snapshot.Write(dir, m.Memory(), json.RawMessage(edit(t, state, tc.edit)))
			require.NoError(t, err)
			r, err := Restore(dir, Config{})
			require.Error(t, err)
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
