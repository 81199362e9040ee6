package vmispec

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // clock.timezone: the launcher and virt-api images carry no zoneinfo

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Timer tick policies and RTC tracking (KubeVirt's domain.clock.timer).
const (
	TickPolicyDelay   = "delay"
	TickPolicyCatchup = "catchup"
	RTCTrackGuest     = "guest"
	RTCTrackWall      = "wall"
)

// present is a timer's or device's *bool switch: set means on unless false.
func present(b *bool) bool { return b == nil || *b }

// TPMEnabled reports whether the VMI asks for a TPM (devices.tpm without
// enabled: false).
func TPMEnabled(s *v1.VirtualMachineInstanceSpec) bool {
	t := s.Domain.Devices.TPM
	return t != nil && present(t.Enabled)
}

// SecureBoot reports whether the VMI boots EFI with secure boot: unless
// efi.secureBoot is false, as KubeVirt defaults it on x86.
func SecureBoot(s *v1.VirtualMachineInstanceSpec) bool {
	fw := s.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil && present(fw.Bootloader.EFI.SecureBoot)
}

// guestIntegrationNeeds lists what of domain.clock, devices.tpm and
// firmware.uuid only QEMU provides. The kubevmm VMM has a CMOS RTC without periodic
// interrupts that follows host time (track wall) from an offset,
// KVM's in-kernel PIT (which delays lost ticks: tick policy delay) and
// kvmclock, and no HPET, Hyper-V or TPM. What neither backend does is
// refused by virt-api (virtapi.validateClock).
func guestIntegrationNeeds(s *v1.VirtualMachineInstanceSpec) []QEMUReason {
	var out []QEMUReason
	add := func(field, why string) { out = append(out, QEMUReason{Field: field, Why: why}) }
	if fw := s.Domain.Firmware; fw != nil && fw.UUID != "" {
		add("domain.firmware.uuid", "the kubevmm VMM has no SMBIOS tables to carry a system UUID")
	}
	if TPMEnabled(s) {
		add("domain.devices.tpm", "a TPM is not supported by the kubevmm VMM")
	}
	c := s.Domain.Clock
	if c == nil || c.Timer == nil {
		return out
	}
	t := c.Timer
	if t.HPET != nil && present(t.HPET.Enabled) {
		add("domain.clock.timer.hpet", "the kubevmm VMM has no HPET")
	}
	if t.Hyperv != nil && present(t.Hyperv.Enabled) {
		add("domain.clock.timer.hyperv", "the kubevmm VMM has no Hyper-V reference clock")
	}
	if t.KVM != nil && !present(t.KVM.Enabled) {
		add("domain.clock.timer.kvm.present", "the kubevmm VMM always gives the guest kvmclock")
	}
	if r := t.RTC; r != nil {
		if r.TickPolicy == TickPolicyCatchup {
			add("domain.clock.timer.rtc.tickPolicy", `"catchup" is not supported by the kubevmm VMM (its RTC raises no periodic interrupts)`)
		}
		if r.Track == RTCTrackGuest {
			add("domain.clock.timer.rtc.track", `"guest" is not supported by the kubevmm VMM (its RTC follows host time)`)
		}
	}
	return out
}

// ValidUUID reports whether u is a UUID as QEMU's -uuid takes it
// (firmware.uuid, the SMBIOS system UUID): 8-4-4-4-12 hex digits.
func ValidUUID(u string) bool {
	if len(u) != 36 {
		return false
	}
	for i, r := range u {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
	}
	return true
}

// RTCOffset is how far the guest's RTC is from host UTC at start:
// clock.utc.offsetSeconds, or the offset of clock.timezone's local time
// at now (as libvirt's timezone clock: fixed at start, a daylight-saving
// change while the VM runs moves nothing). Zero without a clock.
func RTCOffset(c *v1.Clock, now time.Time) (time.Duration, error) {
	switch {
	case c == nil:
		return 0, nil
	case c.Timezone != nil:
		loc, err := time.LoadLocation(*c.Timezone)
		if err != nil {
			return 0, fmt.Errorf("domain.clock.timezone %q: %w", *c.Timezone, err)
		}
		_, off := now.In(loc).Zone()
		return time.Duration(off) * time.Second, nil
	case c.UTC != nil && c.UTC.OffsetSeconds != nil:
		return time.Duration(*c.UTC.OffsetSeconds) * time.Second, nil
	}
	return 0, nil
}
