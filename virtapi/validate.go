package virtapi

import (
	"fmt"
	"strconv"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/launcher/spec"
)

// ValidateVMISpec lists what kubevmm refuses in a VMI spec, each message
// naming the field with its full path (base is "spec." for a VMI and
// "spec.template.spec." for a VM). What only the QEMU backend provides
// (SATA, e1000, Hyper-V, EFI, firmware boot) is accepted: the launcher
// routes such VMIs to QEMU (spec.SelectBackend).
func ValidateVMISpec(s *v1.VirtualMachineInstanceSpec, annotations map[string]string, base string) []string {
	var out []string
	bad := func(field, format string, a ...any) {
		out = append(out, base+field+": "+fmt.Sprintf(format, a...))
	}
	for _, f := range v1.UnmodeledFields(s) {
		bad(f, "is not supported by kubevmm")
	}
	if _, err := spec.GuestMemory(s); err != nil {
		bad("domain.memory.guest", "%v", err)
	}
	if _, _, err := spec.SelectBackend(annotations, s); err != nil {
		out = append(out, "metadata.annotations: "+err.Error())
	}
	if _, err := spec.QEMUAccel(annotations); err != nil {
		out = append(out, "metadata.annotations: "+err.Error())
	}
	vols := map[string]*v1.Volume{}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		p := "volumes[" + strconv.Itoa(i) + "]"
		if vols[v.Name] != nil {
			bad(p+".name", "%q is used twice", v.Name)
		}
		vols[v.Name] = v
		switch {
		case v.ContainerDisk != nil:
			if v.ContainerDisk.Image == "" {
				bad(p+".containerDisk.image", "is required")
			}
		case v.CloudInitNoCloud != nil:
			bad(p+".cloudInitNoCloud", "is not supported by kubevmm yet")
		case v.CloudInitConfigDrive != nil:
			bad(p+".cloudInitConfigDrive", "is not supported by kubevmm yet")
		case v.PersistentVolumeClaim != nil:
			bad(p+".persistentVolumeClaim", "is not supported by kubevmm yet")
		case v.DataVolume != nil:
			bad(p+".dataVolume", "is not supported by kubevmm yet")
		case v.EmptyDisk != nil:
			bad(p+".emptyDisk", "is not supported by kubevmm yet")
		}
	}
	for i, d := range s.Domain.Devices.Disks {
		p := "domain.devices.disks[" + strconv.Itoa(i) + "]"
		if vols[d.Name] == nil {
			bad(p+".name", "no volume named %q", d.Name)
		}
		switch {
		case d.LUN != nil:
			bad(p+".lun", "is not supported by kubevmm")
		case d.CDRom != nil:
			if d.CDRom.Bus != "" && d.CDRom.Bus != v1.DiskBusSATA {
				bad(p+".cdrom.bus", "%q is not supported by kubevmm (sata only)", d.CDRom.Bus)
			}
		case d.Disk != nil:
			switch d.Disk.Bus {
			case "", v1.DiskBusVirtio, v1.DiskBusSATA:
			default:
				bad(p+".disk.bus", "%q is not supported by kubevmm", d.Disk.Bus)
			}
		}
	}
	nets := map[string]*v1.Network{}
	for i := range s.Networks {
		n := &s.Networks[i]
		nets[n.Name] = n
		if n.Multus != nil {
			bad("networks["+strconv.Itoa(i)+"].multus", "is not supported by kubevmm yet")
		}
	}
	podNICs := 0
	for i, ifc := range s.Domain.Devices.Interfaces {
		p := "domain.devices.interfaces[" + strconv.Itoa(i) + "]"
		if nets[ifc.Name] == nil {
			bad(p+".name", "no network named %q", ifc.Name)
		}
		switch ifc.Model {
		case "", "virtio", "e1000":
		default:
			bad(p+".model", "%q is not supported by kubevmm (virtio, e1000)", ifc.Model)
		}
		m := ifc.InterfaceBindingMethod
		switch {
		case m.Masquerade != nil:
			podNICs++
		case m.Bridge != nil:
			bad(p+".bridge", "is not supported by kubevmm yet (use masquerade)")
		case m.Slirp != nil:
			bad(p+".slirp", "is not supported by kubevmm")
		case m.SRIOV != nil:
			bad(p+".sriov", "is not supported by kubevmm")
		case m.Macvtap != nil:
			bad(p+".macvtap", "is not supported by kubevmm")
		case m.Passt != nil, m.PasstBinding != nil:
			bad(p+".passt", "is not supported by kubevmm")
		case ifc.Binding != nil:
			bad(p+".binding", "network binding plugins are not supported by kubevmm")
		default:
			bad(p, "needs a binding (masquerade)")
		}
	}
	if podNICs > 1 {
		bad("domain.devices.interfaces", "only one interface can use the pod network")
	}
	if len(s.Domain.Devices.Inputs) > 0 {
		bad("domain.devices.inputs", "is not supported by kubevmm")
	}
	if c := s.Domain.CPU; c != nil {
		if c.DedicatedCPUPlacement {
			bad("domain.cpu.dedicatedCpuPlacement", "is not supported by kubevmm yet")
		}
		if c.MaxSockets > 0 {
			bad("domain.cpu.maxSockets", "CPU hotplug is not supported by kubevmm")
		}
	}
	if m := s.Domain.Memory; m != nil {
		if m.Hugepages != nil {
			bad("domain.memory.hugepages", "is not supported by kubevmm yet")
		}
		if m.MaxGuest != nil {
			bad("domain.memory.maxGuest", "memory hotplug is not supported by kubevmm")
		}
	}
	if fw := s.Domain.Firmware; fw != nil {
		if fw.Bootloader != nil && fw.Bootloader.EFI != nil && fw.Bootloader.EFI.SecureBoot != nil && *fw.Bootloader.EFI.SecureBoot {
			bad("domain.firmware.bootloader.efi.secureBoot", "is not supported by kubevmm")
		}
		if kb := fw.KernelBoot; kb != nil {
			if kb.Container == nil {
				bad("domain.firmware.kernelBoot.container", "is required")
			} else {
				if kb.Container.Image == "" {
					bad("domain.firmware.kernelBoot.container.image", "is required")
				}
				if kb.Container.KernelPath == "" {
					bad("domain.firmware.kernelBoot.container.kernelPath", "is required")
				}
			}
		}
	}
	if a := s.Architecture; a != "" && a != "amd64" {
		bad("architecture", "%q is not supported by kubevmm (amd64)", a)
	}
	return out
}
