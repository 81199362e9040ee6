package virtapi

import (
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// maxClockOffset bounds clock.utc.offsetSeconds: a century either way
// keeps the RTC's date within what its century register and QEMU's
// -rtc base take.
const maxClockOffset = 100 * 365 * 24 * time.Hour

// validateClock admits the clock both backends run (vmispec.RTCOffset; the
// timers our VMM lacks send the VMI to QEMU: vmispec.NeedsQEMU) and refuses
// what neither does: removing the PIT or the RTC (both machines have
// them), an HPET tick policy, PIT tick policies other than KVM's delay,
// Hyper-V's synthetic timers without its clock (QEMU's hv-stimer needs
// hv-time).
func validateClock(p *field.Path, c *v1.Clock, f *v1.Features) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if c.UTC != nil && c.Timezone != nil {
		errs = append(errs, invalid(p, "utc, timezone", "only one of utc and timezone"))
	}
	if tz := c.Timezone; tz != nil {
		// "" and "Local" are zones of the launcher's host, not of the guest.
		if _, err := time.LoadLocation(*tz); err != nil || *tz == "" || *tz == "Local" {
			errs = append(errs, invalid(p.Child("timezone"), *tz, "not an IANA time zone name (such as Europe/Berlin)"))
		}
	}
	if u := c.UTC; u != nil && u.OffsetSeconds != nil {
		if o, most := *u.OffsetSeconds, int(maxClockOffset/time.Second); o > most || o < -most {
			errs = append(errs, invalid(p.Child("utc", "offsetSeconds"), o, "at most %d seconds (100 years) either way", most))
		}
	}
	t := c.Timer
	if t == nil {
		return errs
	}
	tp := p.Child("timer")
	if h := t.Hyperv; h != nil && isFalse(h.Enabled) && f != nil && f.Hyperv != nil && f.Hyperv.SyNICTimer != nil {
		errs = append(errs, invalid(tp.Child("hyperv", "present"), false, "domain.features.hyperv.synictimer needs the Hyper-V clock"))
	}
	if h := t.HPET; h != nil && h.TickPolicy != "" {
		errs = append(errs, unsupported(tp, "hpet.tickPolicy", "neither backend sets the HPET's tick policy"))
	}
	if pit := t.PIT; pit != nil {
		if isFalse(pit.Enabled) {
			errs = append(errs, notSupported(tp.Child("pit", "present"), false, "the guest always has a PIT"))
		}
		if pit.TickPolicy != "" && pit.TickPolicy != vmispec.TickPolicyDelay {
			errs = append(errs, notSupported(tp.Child("pit", "tickPolicy"), pit.TickPolicy, "delay, what KVM's in-kernel PIT does"))
		}
	}
	if r := t.RTC; r != nil {
		if isFalse(r.Enabled) {
			errs = append(errs, notSupported(tp.Child("rtc", "present"), false, "the guest always has an RTC"))
		}
		switch r.TickPolicy {
		case "", vmispec.TickPolicyDelay, vmispec.TickPolicyCatchup:
		default:
			errs = append(errs, notSupported(tp.Child("rtc", "tickPolicy"), r.TickPolicy, "delay, catchup"))
		}
		switch r.Track {
		case "", vmispec.RTCTrackGuest, vmispec.RTCTrackWall:
		default:
			errs = append(errs, notSupported(tp.Child("rtc", "track"), r.Track, "guest, wall"))
		}
	}
	return errs
}

// validateTPM: the QEMU backend gives the guest a TPM 2.0 (swtpm) whose
// state lives in the launcher pod as long as the VMI; KubeVirt keeps a
// persistent TPM's state on a PVC, which kubevmm has no storage for.
func validateTPM(p *field.Path, t *v1.TPMDevice) field.ErrorList {
	if t == nil || !isTrue(t.Persistent) {
		return nil
	}
	return field.ErrorList{notSupported(p.Child("persistent"), true, "the TPM's state lives as long as the VMI: keeping it across restarts needs a PVC")}
}

// validateSecureBoot: as in KubeVirt, secure boot needs SMM (the firmware
// guards its variable store with it).
func validateSecureBoot(p *field.Path, s *v1.VirtualMachineInstanceSpec) field.ErrorList {
	if !vmispec.SecureBoot(s) {
		return nil
	}
	if f := s.Domain.Features; f == nil || f.SMM == nil || isFalse(f.SMM.Enabled) {
		return field.ErrorList{invalid(p, true, "secure boot needs domain.features.smm")}
	}
	return nil
}
