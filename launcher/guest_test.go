package launcher

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/launcher/qemu"
)

// TestGuestIntegrationConfig: a VMI's clock, timers, secure boot, TPM and
// UUID reach both backends' configurations.
func TestGuestIntegrationConfig(t *testing.T) {
	now := time.Date(2026, time.July, 1, 12, 0, 0, 0, time.UTC)
	windows := func(s *v1.VirtualMachineInstanceSpec) {
		s.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{}, Timer: &v1.Timer{
			HPET: &v1.HPETTimer{Enabled: ptr.To(false)}, Hyperv: &v1.HypervTimer{},
			PIT: &v1.PITTimer{TickPolicy: "delay"}, RTC: &v1.RTCTimer{TickPolicy: "catchup"}}}
		s.Domain.Devices.TPM = &v1.TPMDevice{}
		s.Domain.Firmware.UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"
		s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr.To(true)}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstanceSpec)
		offset time.Duration
		want   func(*qemu.Config)
	}{
		{name: "no clock", mutate: func(*v1.VirtualMachineInstanceSpec) {}, want: func(*qemu.Config) {}},
		{name: "vmi-windows.yaml", mutate: windows, want: func(q *qemu.Config) {
			q.Clock = qemu.Clock{RTCCatchup: true, PITDelay: true, HPET: ptr.To(false), HyperVClock: ptr.To(true)}
			q.SecureBoot, q.TPM, q.UUID = true, true, "5d307ca9-b3ef-428c-8861-06e72d69f223"
		}},
		{name: "an offset, kvmclock off, RTC on guest time", mutate: func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{OffsetSeconds: ptr.To(-7200)},
				Timer: &v1.Timer{KVM: &v1.KVMTimer{Enabled: ptr.To(false)}, RTC: &v1.RTCTimer{Track: "guest"}}}
		}, offset: -2 * time.Hour, want: func(q *qemu.Config) {
			q.Clock = qemu.Clock{RTCBase: now.Add(-2 * time.Hour), RTCTrackGuest: true, KVMClock: ptr.To(false)}
		}},
		{name: "a timezone in summer", mutate: func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Clock = &v1.Clock{Timezone: ptr.To("Europe/Berlin")}
		}, offset: 2 * time.Hour, want: func(q *qemu.Config) { q.Clock.RTCBase = now.Add(2 * time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := testVMI()
			tc.mutate(&vmi.Spec)
			var c VMConfig
			require.NoError(t, c.guestIntegration(&vmi.Spec, now))
			assert.Equal(t, tc.offset, c.RTCOffset, "the RTC offset both backends get")
			var got, want qemu.Config
			c.qemuGuestIntegration(&got, now)
			tc.want(&want)
			assert.Equal(t, want, got)
		})
	}

	// Our VMM's RTC gets the offset.
	p := testPaths(t)
	vmi := testVMI()
	vmi.Spec.Domain.Clock = &v1.Clock{UTC: &v1.ClockOffsetUTC{OffsetSeconds: ptr.To(5400)}}
	c, err := BuildVMConfig(vmi, p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(c.Kernel, []byte("kernel"), 0o644))
	require.NoError(t, os.WriteFile(c.Initrd, []byte("initrd"), 0o644))
	require.NoError(t, os.WriteFile(c.Disks[0].Path, make([]byte, 512), 0o644))
	mc, err := c.MachineConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, 90*time.Minute, mc.RTCOffset)

	vmi.Spec.Domain.Clock = &v1.Clock{Timezone: ptr.To("Nowhere/Else")}
	_, err = BuildVMConfig(vmi, p)
	assert.ErrorContains(t, err, `domain.clock.timezone "Nowhere/Else"`)
}
