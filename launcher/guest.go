package launcher

import (
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
)

// guestIntegration fills in the firmware (EFI, secure boot, UUID),
// Hyper-V, the clock and the TPM of the VMI (at now: a timezone's offset
// is the one in force at start).
func (c *VMConfig) guestIntegration(s *v1.VirtualMachineInstanceSpec, now time.Time) error {
	fw := s.Domain.Firmware
	c.EFI = fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil
	c.HyperV = s.Domain.Features != nil && s.Domain.Features.Hyperv != nil
	off, err := vmispec.RTCOffset(s.Domain.Clock, now)
	if err != nil {
		return err
	}
	c.RTCOffset = off
	if s.Domain.Clock != nil {
		c.Timers = s.Domain.Clock.Timer
	}
	c.SecureBoot = vmispec.SecureBoot(s)
	c.TPM = vmispec.TPMEnabled(s)
	if fw != nil {
		c.UUID = string(fw.UUID)
	}
	return nil
}

// qemuGuestIntegration maps them onto QEMU's configuration as libvirt
// does for KubeVirt: the RTC starts at now plus the offset; an RTC tick
// policy catchup slews, track guest runs it on guest time; a PIT tick
// policy delay is KVM's in-kernel PIT's; the hpet, kvm and hyperv
// timers switch their devices. The TPM's state lives in the run
// directory: it survives QEMU and launcher restarts within the pod, not
// the VMI (spec: persistent TPMs are refused).
func (c VMConfig) qemuGuestIntegration(qc *qemu.Config, now time.Time) {
	if c.RTCOffset != 0 {
		qc.Clock.RTCBase = now.UTC().Add(c.RTCOffset)
	}
	if t := c.Timers; t != nil {
		if t.RTC != nil {
			qc.Clock.RTCCatchup = t.RTC.TickPolicy == vmispec.TickPolicyCatchup
			qc.Clock.RTCTrackGuest = t.RTC.Track == vmispec.RTCTrackGuest
		}
		qc.Clock.PITDelay = t.PIT != nil && t.PIT.TickPolicy == vmispec.TickPolicyDelay
		if t.HPET != nil {
			qc.Clock.HPET = present(t.HPET.Enabled)
		}
		if t.KVM != nil {
			qc.Clock.KVMClock = present(t.KVM.Enabled)
		}
		if t.Hyperv != nil {
			qc.Clock.HyperVClock = present(t.Hyperv.Enabled)
		}
	}
	qc.SecureBoot = c.SecureBoot
	qc.TPM = c.TPM
	qc.UUID = c.UUID
}

// present is a timer's present switch as a definite value: on unless false.
func present(b *bool) *bool {
	on := b == nil || *b
	return &on
}
