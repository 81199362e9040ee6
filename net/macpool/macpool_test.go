package macpool_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/net/macpool"
)

func mac(t *testing.T, s string) macpool.MAC {
	t.Helper()
	m, err := macpool.ParseMAC(s)
	require.NoError(t, err)
	return m
}

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "02:00:00:00:00:01", want: "02:00:00:00:00:01"},
		{in: "02-AB-00-00-00-FF", want: "02:ab:00:00:00:ff"},
		{in: "0200.0000.0a0b", want: "02:00:00:00:0a:0b"},
		{in: "01:00:5e:00:00:01", err: "multicast"},
		{in: "ff:ff:ff:ff:ff:ff", err: "multicast"},
		{in: "02:00:00:00:00", err: "not a MAC address"},
		{in: "02:00:00:00:00:00:00:01", err: "not a 48-bit MAC address"},
		{in: "zz:00:00:00:00:01", err: "not a MAC address"},
		{in: "", err: "not a MAC address"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, err := macpool.ParseMAC(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, m.String())
		})
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		name, start, end, err string
		set                   bool
	}{
		{name: "neither", set: false},
		{name: "both", start: "02:00:00:00:00:00", end: "02:00:00:00:00:ff", set: true},
		{name: "only start", start: "02:00:00:00:00:00", err: "both its start and its end"},
		{name: "only end", end: "02:00:00:00:00:ff", err: "both its start and its end"},
		{name: "multicast start", start: "03:00:00:00:00:00", end: "04:00:00:00:00:00", err: "range start: \"03:00:00:00:00:00\" is a multicast"},
		{name: "multicast end", start: "02:00:00:00:00:00", end: "03:00:00:00:00:00", err: "range end:"},
		{name: "end equals start", start: "02:00:00:00:00:00", end: "02:00:00:00:00:00", err: "is not after its start"},
		{name: "end before start", start: "02:00:00:00:01:00", end: "02:00:00:00:00:ff", err: "is not after its start"},
		{name: "garbage", start: "x", end: "02:00:00:00:00:ff", err: "not a MAC address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok, err := macpool.ParseRange(tc.start, tc.end)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.set, ok)
			if ok {
				assert.Equal(t, tc.start, r.Start.String())
				assert.Equal(t, tc.end, r.End.String())
			}
		})
	}
}

func TestRandomRange(t *testing.T) {
	r, err := macpool.RandomRange()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(r.Start.String(), "02:"), r.Start.String())
	assert.True(t, strings.HasSuffix(r.Start.String(), ":00:00:00"), r.Start.String())
	assert.Equal(t, r.Start.String()[:8]+":ff:ff:ff", r.End.String())
	_, ok, err := macpool.ParseRange(r.Start.String(), r.End.String())
	require.NoError(t, err, "a random range is a valid range")
	assert.True(t, ok)
}

func TestAllocate(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:03")
	require.NoError(t, err)
	p := macpool.New(r)

	// Distinct MACs in order while the range lasts; a MAC a VM asked for
	// is skipped.
	assert.Empty(t, p.Hold("ns/b", mac(t, "02:00:00:00:00:01")))
	got := []string{}
	for _, owner := range []string{"ns/a", "ns/a", "ns/c"} {
		m, err := p.Allocate(owner)
		require.NoError(t, err)
		got = append(got, m.String())
	}
	assert.Equal(t, []string{"02:00:00:00:00:00", "02:00:00:00:00:02", "02:00:00:00:00:03"}, got)

	// Exhausted: an error, nothing handed out twice.
	_, err = p.Allocate("ns/d")
	require.ErrorIs(t, err, macpool.ErrExhausted)
	assert.Empty(t, p.Held("ns/d"))

	// A released MAC is free again, found by wrapping around.
	p.Release("ns/a")
	m, err := p.Allocate("ns/d")
	require.NoError(t, err)
	assert.Equal(t, "02:00:00:00:00:00", m.String())
	m, err = p.Allocate("ns/e")
	require.NoError(t, err)
	assert.Equal(t, "02:00:00:00:00:02", m.String())
	assert.Empty(t, p.Collisions())
}

func TestAllocateAfterRangeChange(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:01")
	require.NoError(t, err)
	p := macpool.New(r)
	_, err = p.Allocate("ns/a")
	require.NoError(t, err)
	r2, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:0f")
	require.NoError(t, err)
	p.SetRange(r2)
	m, err := p.Allocate("ns/b")
	require.NoError(t, err)
	assert.Equal(t, "02:00:00:00:00:01", m.String(), "what was held before the change stays held")
}

func TestCollisions(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:ff")
	require.NoError(t, err)
	p := macpool.New(r)
	m, err := p.Allocate("ns/a")
	require.NoError(t, err)
	assert.Equal(t, []string{"ns/a"}, p.Hold("ns/b", m), "the other owner")
	assert.Equal(t, map[macpool.MAC]int{m: 2}, p.Collisions())
	p.Set("ns/b", nil)
	assert.Empty(t, p.Collisions(), "a VM that gave the MAC up")
	assert.Equal(t, []string{"ns/a"}, p.Owners(m))
}

func TestPendingTakenOver(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:ff")
	require.NoError(t, err)
	p := macpool.New(r)
	m, err := p.Allocate("ns/?uid")
	require.NoError(t, err)
	p.MarkPending("ns/?uid")
	p.Set("ns/vm-x7k2", []macpool.MAC{m})
	assert.Equal(t, []string{"ns/vm-x7k2"}, p.Owners(m), "the VM the admission named took it over: no collision")
	assert.Empty(t, p.Held("ns/?uid"))
}

func vm(ns, name string, macs ...string) v1.VirtualMachine {
	var ifs []v1.Interface
	for i, m := range macs {
		ifs = append(ifs, v1.Interface{Name: "nic" + string(rune('0'+i)), MacAddress: m})
	}
	return v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Devices: v1.Devices{Interfaces: ifs}}}}}}
}

func TestRebuild(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:03")
	require.NoError(t, err)
	p := macpool.New(r)
	errs := p.Rebuild([]v1.VirtualMachine{
		vm("a", "one", "02:00:00:00:00:00", "", "02-00-00-00-00-02"),
		vm("b", "two", "02:00:00:00:00:01", "bogus"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "no-template"}},
	})
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "VM b/two interface nic1: \"bogus\" is not a MAC address")
	assert.Equal(t, []macpool.MAC{mac(t, "02:00:00:00:00:00"), mac(t, "02:00:00:00:00:02")}, p.Held("a/one"))
	m, err := p.Allocate("d/new")
	require.NoError(t, err)
	assert.Equal(t, "02:00:00:00:00:03", m.String(), "the one MAC the VMs do not hold")
	_, err = p.Allocate("d/new")
	require.ErrorIs(t, err, macpool.ErrExhausted)
}

func TestCheckInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name string
		macs []string
		want []string
	}{
		{name: "none set", macs: []string{"", ""}},
		{name: "distinct", macs: []string{"02:00:00:00:00:01", "02:00:00:00:00:02", ""}},
		{name: "invalid", macs: []string{"", "02:00:00:00:00"},
			want: []string{`spec.template.spec.domain.devices.interfaces[1].macAddress (interface nic1): "02:00:00:00:00" is not a MAC address`}},
		{name: "multicast", macs: []string{"01:00:5e:00:00:01"},
			want: []string{`spec.template.spec.domain.devices.interfaces[0].macAddress (interface nic0): "01:00:5e:00:00:01" is a multicast MAC address, a NIC's must be unicast`}},
		{name: "duplicate in another spelling", macs: []string{"02:00:00:00:00:0a", "", "02-00-00-00-00-0A"},
			want: []string{`spec.template.spec.domain.devices.interfaces[2].macAddress (interface nic2): MAC 02-00-00-00-00-0A is already interface nic0's in this VM`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := vm("ns", "vm", tc.macs...)
			var got []string
			for _, e := range macpool.CheckInterfaces(v.Spec.Template.Spec.Domain.Devices.Interfaces) {
				got = append(got, e.Error())
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
