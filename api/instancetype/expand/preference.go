package expand

import (
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyPreference sets each preferred value where s leaves the field
// unset. What the VMI cannot have (a SCSI disk bus, say) is then refused
// by the VMI's own validation, naming the VMI field.
func applyPreference(s *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta, pref *v1beta1.VirtualMachinePreferenceSpec) {
	if c := pref.Clock; c != nil {
		applyClock(s, c)
	}
	if d := pref.Devices; d != nil {
		applyDevices(&s.Domain.Devices, d)
		applyDisks(s.Domain.Devices.Disks, d)
		applyInterfaces(s, d)
	}
	if f := pref.Features; f != nil {
		applyFeatures(s, f)
	}
	if f := pref.Firmware; f != nil {
		applyFirmware(s, f)
	}
	if pref.PreferredSubdomain != nil && s.Subdomain == "" {
		s.Subdomain = *pref.PreferredSubdomain
	}
	if pref.PreferredTerminationGracePeriodSeconds != nil && s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To(*pref.PreferredTerminationGracePeriodSeconds)
	}
	if pref.PreferredArchitecture != nil && s.Architecture == "" {
		s.Architecture = *pref.PreferredArchitecture
	}
	addMissing(meta, pref.Annotations)
}

func applyClock(s *v1.VirtualMachineInstanceSpec, c *v1beta1.ClockPreferences) {
	if c.PreferredClockOffset == nil && c.PreferredTimer == nil {
		return
	}
	if s.Domain.Clock == nil {
		s.Domain.Clock = &v1.Clock{}
	}
	clock := s.Domain.Clock
	if o := c.PreferredClockOffset; o != nil && clock.UTC == nil && clock.Timezone == nil {
		clock.UTC = o.UTC.DeepCopy()
		if o.Timezone != nil {
			clock.Timezone = ptr.To(*o.Timezone)
		}
	}
	if c.PreferredTimer != nil && clock.Timer == nil {
		clock.Timer = c.PreferredTimer.DeepCopy()
	}
}

// setBool sets *dst to a copy of pref when dst is unset.
func setBool(dst **bool, pref *bool) {
	if *dst == nil && pref != nil {
		*dst = ptr.To(*pref)
	}
}

func applyDevices(dev *v1.Devices, d *v1beta1.DevicePreferences) {
	setBool(&dev.AutoattachGraphicsDevice, d.PreferredAutoattachGraphicsDevice)
	setBool(&dev.AutoattachMemBalloon, d.PreferredAutoattachMemBalloon)
	setBool(&dev.AutoattachPodInterface, d.PreferredAutoattachPodInterface)
	setBool(&dev.AutoattachSerialConsole, d.PreferredAutoattachSerialConsole)
	setBool(&dev.AutoattachInputDevice, d.PreferredAutoattachInputDevice)
	setBool(&dev.UseVirtioTransitional, d.PreferredUseVirtioTransitional)
	setBool(&dev.BlockMultiQueue, d.PreferredBlockMultiQueue)
	setBool(&dev.NetworkInterfaceMultiQueue, d.PreferredNetworkInterfaceMultiQueue)
	if d.PreferredDisableHotplug != nil && !dev.DisableHotplug {
		dev.DisableHotplug = *d.PreferredDisableHotplug
	}
	if d.PreferredRng != nil && dev.Rng == nil {
		dev.Rng = &v1.Rng{}
	}
	if d.PreferredTPM != nil && dev.TPM == nil {
		dev.TPM = d.PreferredTPM.DeepCopy()
	}
	for i := range dev.Inputs {
		in := &dev.Inputs[i]
		if in.Bus == "" {
			in.Bus = d.PreferredInputBus
		}
		if in.Type == "" {
			in.Type = d.PreferredInputType
		}
	}
}

func applyDisks(disks []v1.Disk, d *v1beta1.DevicePreferences) {
	for i := range disks {
		disk := &disks[i]
		// A disk that names no device is a plain disk (KubeVirt's default),
		// made explicit so its bus can be preferred.
		if disk.Disk == nil && disk.CDRom == nil && disk.LUN == nil {
			disk.Disk = &v1.DiskTarget{}
		}
		switch {
		case disk.Disk != nil:
			if disk.Disk.Bus == "" {
				disk.Disk.Bus = d.PreferredDiskBus
			}
			if disk.Cache == "" {
				disk.Cache = d.PreferredDiskCache
			}
			if disk.IO == "" {
				disk.IO = d.PreferredDiskIO
			}
			if disk.Disk.Bus == v1.DiskBusVirtio {
				setBool(&disk.DedicatedIOThread, d.PreferredDiskDedicatedIoThread)
			}
		case disk.CDRom != nil:
			if disk.CDRom.Bus == "" {
				disk.CDRom.Bus = d.PreferredCdromBus
			}
		case disk.LUN != nil:
			if disk.LUN.Bus == "" {
				disk.LUN.Bus = d.PreferredLunBus
			}
		}
	}
}

func applyInterfaces(s *v1.VirtualMachineInstanceSpec, d *v1beta1.DevicePreferences) {
	onPod := map[string]bool{}
	for _, n := range s.Networks {
		onPod[n.Name] = n.Pod != nil
	}
	for i := range s.Domain.Devices.Interfaces {
		ifc := &s.Domain.Devices.Interfaces[i]
		if ifc.Model == "" {
			ifc.Model = d.PreferredInterfaceModel
		}
		if d.PreferredInterfaceMasquerade != nil && ifc.Binding == nil && (ifc.InterfaceBindingMethod == v1.InterfaceBindingMethod{}) && onPod[ifc.Name] {
			ifc.Masquerade = &v1.InterfaceMasquerade{}
		}
	}
}

func applyFeatures(s *v1.VirtualMachineInstanceSpec, f *v1beta1.FeaturePreferences) {
	created := s.Domain.Features == nil
	if created {
		s.Domain.Features = &v1.Features{}
	}
	ft := s.Domain.Features
	if ft.ACPI == nil && f.PreferredAcpi != nil {
		ft.ACPI = f.PreferredAcpi.DeepCopy()
	}
	if ft.APIC == nil && f.PreferredApic != nil {
		ft.APIC = f.PreferredApic.DeepCopy()
	}
	if ft.Hyperv == nil && f.PreferredHyperv != nil {
		ft.Hyperv = f.PreferredHyperv.DeepCopy()
	}
	if ft.KVM == nil && f.PreferredKvm != nil {
		ft.KVM = f.PreferredKvm.DeepCopy()
	}
	if ft.Pvspinlock == nil && f.PreferredPvspinlock != nil {
		ft.Pvspinlock = f.PreferredPvspinlock.DeepCopy()
	}
	if ft.SMM == nil && f.PreferredSmm != nil {
		ft.SMM = f.PreferredSmm.DeepCopy()
	}
	if created && *ft == (v1.Features{}) {
		s.Domain.Features = nil
	}
}

// applyFirmware chooses the bootloader when the VM names none: BIOS, else
// preferredEfi, else the deprecated preferredUseEfi/preferredUseSecureBoot.
func applyFirmware(s *v1.VirtualMachineInstanceSpec, f *v1beta1.FirmwarePreferences) {
	if s.Domain.Firmware != nil && s.Domain.Firmware.Bootloader != nil {
		return
	}
	var b *v1.Bootloader
	switch {
	case f.PreferredUseBios != nil && *f.PreferredUseBios:
		b = &v1.Bootloader{BIOS: &v1.BIOS{}}
		setBool(&b.BIOS.UseSerial, f.PreferredUseBiosSerial)
	case f.PreferredEfi != nil:
		b = &v1.Bootloader{EFI: f.PreferredEfi.DeepCopy()}
	case f.PreferredUseEfi != nil && *f.PreferredUseEfi:
		b = &v1.Bootloader{EFI: &v1.EFI{}}
		setBool(&b.EFI.SecureBoot, f.PreferredUseSecureBoot)
	default:
		return
	}
	if s.Domain.Firmware == nil {
		s.Domain.Firmware = &v1.Firmware{}
	}
	s.Domain.Firmware.Bootloader = b
}
