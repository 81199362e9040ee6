package virtapi

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// implemented are the leaf fields of a VMI spec that kubevmm honours, with
// where. Every other leaf must be refused by ValidateVMISpec (at the field
// or an enclosing one) when set: TestEveryFieldDecided.
var implemented = map[string]string{
	"priorityClassName":             "copied to the launcher pod (controller.RenderLauncherPod)",
	"nodeSelector":                  "copied to the launcher pod",
	"affinity":                      "copied to the launcher pod",
	"schedulerName":                 "copied to the launcher pod",
	"serviceAccountName":            "copied to the launcher pod",
	"tolerations[0]":                "copied to the launcher pod",
	"topologySpreadConstraints[0]":  "copied to the launcher pod",
	"hostname":                      "copied to the launcher pod",
	"subdomain":                     "copied to the launcher pod",
	"dnsPolicy":                     "copied to the launcher pod",
	"dnsConfig":                     "copied to the launcher pod",
	"terminationGracePeriodSeconds": "the launcher's shutdown grace, and the pod's plus a margin (controller.GracePeriodSeconds)",

	"domain.resources.requests":                "the compute container's requests, memory plus overhead (controller.launcherResources); memory is the guest's when memory.guest is unset (spec.GuestMemory)",
	"domain.resources.limits":                  "the compute container's limits, memory plus overhead",
	"domain.resources.overcommitGuestOverhead": "leaves the overhead out of the memory request (controller.launcherResources)",
	"domain.cpu.cores":                         "the vCPU count (spec.VCPUs); the guest sees one socket of that many cores",
	"domain.memory.guest":                      "the guest's RAM (spec.GuestMemory)",

	"domain.firmware.kernelBoot.kernelArgs":                "the kernel command line (launcher.BuildVMConfig)",
	"domain.firmware.kernelBoot.container.image":           "the kernel-boot init container (controller.bootFileContainers)",
	"domain.firmware.kernelBoot.container.imagePullSecret": "the pod's imagePullSecrets",
	"domain.firmware.kernelBoot.container.imagePullPolicy": "the kernel-boot init container",
	"domain.firmware.kernelBoot.container.kernelPath":      "copied out of the image; the kernel booted",
	"domain.firmware.kernelBoot.container.initrdPath":      "copied out of the image; the initrd",

	"domain.devices.disableHotplug":             "addvolume refuses a VMI (or VM) that sets it (virtapi/hotplug.go)",
	"domain.devices.autoattachPodInterface":     "the mutating webhook adds the pod NIC only when it is not false (defaultSpec)",
	"domain.devices.rng":                        "a virtio-rng device (launcher.VMConfig.RNG)",
	"domain.devices.autoattachVSOCK":            "a cluster-unique status.VSOCKCID for the guest's vsock device (controller.assignVSOCKCID) and the vsock subresource",
	"domain.devices.blockMultiQueue":            "a request queue per vCPU for each virtio disk (spec.DiskQueues), on both backends",
	"domain.devices.networkInterfaceMultiqueue": "a multi-queue tap and a queue pair per vCPU for virtio NICs (spec.NICQueues), on both backends",
	"domain.devices.tpm.enabled":                "a TPM 2.0 on QEMU: swtpm, state in the launcher pod (launcher/qemu Config.TPM); false: none",

	"domain.clock.utc.offsetSeconds":    "the RTC's offset from host UTC (spec.RTCOffset): the kubevmm VMM's RTC, QEMU's -rtc base",
	"domain.clock.timezone":             "the RTC reads the zone's local time (spec.RTCOffset)",
	"domain.clock.timer.hpet.present":   "true: QEMU's HPET (spec.NeedsQEMU); false: none (the kubevmm VMM has none, QEMU's -machine hpet=off)",
	"domain.clock.timer.kvm.present":    "true: kvmclock (both backends; not under TCG); false: QEMU's -cpu kvmclock=off",
	"domain.clock.timer.hyperv.present": "true: QEMU's hv-time; false: without it",
	"domain.clock.timer.pit.tickPolicy": "delay only: KVM's in-kernel PIT (QEMU: kvm-pit.lost_tick_policy=delay)",
	"domain.clock.timer.rtc.tickPolicy": "catchup: QEMU's -rtc driftfix=slew; delay: both backends",
	"domain.clock.timer.rtc.track":      "guest: QEMU's -rtc clock=vm; wall: both backends",

	"domain.firmware.uuid":                      "QEMU's -uuid, the SMBIOS system UUID (spec.NeedsQEMU: the kubevmm VMM has no SMBIOS)",
	"domain.firmware.bootloader.efi.secureBoot": "true (KubeVirt's default): QEMU with OVMF's secure-boot build and SMM (launcher/qemu Config.SecureBoot), needs features.smm; false: OVMF without it",

	"domain.devices.disks[0].name":          "the volume it attaches",
	"domain.devices.disks[0].disk.readonly": "a read-only virtio-blk disk (refused on SATA: QEMU's are writable)",
	"domain.devices.disks[0].bootOrder":     "QEMU's bootindex (launcher/qemu); the kubevmm VMM boots its kernel directly",
	"domain.devices.disks[0].serial":        "the virtio-blk (or SATA) serial, up to 20 characters",

	"domain.devices.interfaces[0].name":              "the network it attaches",
	"domain.devices.interfaces[0].masquerade":        "a tap NATed behind the pod IP (handler network, spec.PodNICs)",
	"domain.devices.interfaces[0].macAddress":        "the NIC's MAC (spec.PodNIC.MACFor)",
	"domain.devices.interfaces[0].bridge":            "on a multus network: the tap and the pod's interface on one in-pod bridge (handler bridge.go)",
	"domain.devices.interfaces[0].state":             "down: the virtio-net link status bit clear (vnet.Config.LinkDown)",
	"domain.devices.interfaces[0].ports[0].name":     "unique per interface, otherwise only a label",
	"domain.devices.interfaces[0].ports[0].port":     "masquerade DNATs only the listed ports (handler network.go)",
	"domain.devices.interfaces[0].ports[0].protocol": "TCP (default) or UDP",
	"networks[0].multus.networkName":                 "the NetworkAttachmentDefinition in the launcher pod's networks annotation (controller multus.go)",

	"networks[0].name": "the interface it attaches",

	"volumes[0].name":                          "the disk it backs",
	"volumes[0].containerDisk.image":           "the volume's init container (controller.bootFileContainers)",
	"volumes[0].containerDisk.imagePullSecret": "the pod's imagePullSecrets",
	"volumes[0].containerDisk.path":            "the file copied out of the image",
	"volumes[0].containerDisk.imagePullPolicy": "the volume's init container",

	"volumes[0].persistentVolumeClaim.claimName":    "the launcher pod's volume, its mode and size read by virt-controller (controller/volumes.go)",
	"volumes[0].persistentVolumeClaim.readOnly":     "a read-only mount and disk",
	"volumes[0].persistentVolumeClaim.hotpluggable": "a hot-plugged volume: a SCSI disk, checked as addvolume checks it (virtapi/hotplug.go), left out of the launcher pod",
	"volumes[0].dataVolume.hotpluggable":            "a hot-plugged volume: a SCSI disk, checked as addvolume checks it (virtapi/hotplug.go), left out of the launcher pod",
	"volumes[0].emptyDisk.capacity":                 "the sparse image's size (launcher/volumes.go)",
	"volumes[0].ephemeral.persistentVolumeClaim":    "the claim mounted read-only, the backing file of a qcow2 overlay in the pod (launcher/volumes.go)",
	"volumes[0].hostDisk.path":                      "a hostPath volume of its directory (controller/volumes.go), the image in it",
	"volumes[0].hostDisk.type":                      "Disk: the image must exist; DiskOrCreate: created sparse (launcher/volumes.go)",
	"volumes[0].hostDisk.capacity":                  "the size of the image DiskOrCreate creates",
	"volumes[0].hostDisk.shared":                    "LiveMigratable (launcher/spec/volumes.go)",

	"volumes[0].cloudInitNoCloud.userData":                      "user-data on the NoCloud disk the launcher renders (launcher/cloudinit)",
	"volumes[0].cloudInitNoCloud.userDataBase64":                "user-data, decoded",
	"volumes[0].cloudInitNoCloud.secretRef.name":                "user-data from the Secret's userdata (or userData) key, mounted into the launcher pod (controller.cloudInitVolumes)",
	"volumes[0].cloudInitNoCloud.networkData":                   "network-config on the NoCloud disk",
	"volumes[0].cloudInitNoCloud.networkDataBase64":             "network-config, decoded",
	"volumes[0].cloudInitNoCloud.networkDataSecretRef.name":     "network-config from the Secret's networkdata (or networkData) key",
	"volumes[0].cloudInitConfigDrive.userData":                  "openstack/latest/user_data on the ConfigDrive the launcher renders",
	"volumes[0].cloudInitConfigDrive.userDataBase64":            "user_data, decoded",
	"volumes[0].cloudInitConfigDrive.secretRef.name":            "user_data from the Secret's userdata (or userData) key",
	"volumes[0].cloudInitConfigDrive.networkData":               "openstack/latest/network_data.json",
	"volumes[0].cloudInitConfigDrive.networkDataBase64":         "network_data.json, decoded",
	"volumes[0].cloudInitConfigDrive.networkDataSecretRef.name": "network_data.json from the Secret's networkdata (or networkData) key",

	"accessCredentials[0].sshPublicKey.source.secret.secretName":      "every key of the Secret is a public key in the cloud-init metadata (launcher/cloudinit)",
	"accessCredentials[0].sshPublicKey.propagationMethod.noCloud":     "the keys go into the NoCloud meta-data's public-keys",
	"accessCredentials[0].sshPublicKey.propagationMethod.configDrive": "the keys go into meta_data.json's public_keys",
}

// honoured are *bool leaves accepted at one value only, the one that says
// what kubevmm does anyway; the other value is refused.
var honoured = map[string]bool{
	"domain.devices.useVirtioTransitional":    false,
	"domain.devices.autoattachGraphicsDevice": false,
	"domain.devices.autoattachSerialConsole":  true,
	"domain.devices.logSerialConsole":         false,
	"domain.devices.autoattachMemBalloon":     false,
	"domain.devices.autoattachInputDevice":    false,

	"domain.devices.disks[0].dedicatedIOThread":    false,
	"domain.devices.disks[0].shareable":            false,
	"domain.devices.disks[0].changedBlockTracking": false,
	"domain.devices.disks[0].cdrom.readonly":       true,

	"domain.firmware.bootloader.bios.useSerial": false,
	"domain.devices.tpm.persistent":             false,
	"domain.clock.timer.pit.present":            true,
	"domain.clock.timer.rtc.present":            true,
	"domain.firmware.bootloader.efi.persistent": false,

	"domain.features.acpi.enabled": true,
	"domain.features.apic.enabled": true,
	"domain.features.smm.enabled":  false,
	// Hyper-V sends the VMI to QEMU, which gets these enlightenments.
	"domain.features.hyperv.relaxed.enabled":     true,
	"domain.features.hyperv.vapic.enabled":       true,
	"domain.features.hyperv.spinlocks.enabled":   true,
	"domain.features.hyperv.vpindex.enabled":     true,
	"domain.features.hyperv.runtime.enabled":     true,
	"domain.features.hyperv.synic.enabled":       true,
	"domain.features.hyperv.synictimer.enabled":  true,
	"domain.features.hyperv.reset.enabled":       true,
	"domain.features.hyperv.frequencies.enabled": true,
	"domain.features.hyperv.tlbflush.enabled":    true,
	"domain.features.hyperv.ipi.enabled":         true,
}

var (
	v1PkgPath     = reflect.TypeOf(v1.VirtualMachineInstanceSpec{}).PkgPath()
	unmodeledType = reflect.TypeOf(v1.Unmodeled{})
	quantityType  = reflect.TypeOf(resource.Quantity{})
)

// leaf is one settable field of the spec: its JSON path and how to reach it
// (field indexes; -1 steps into a slice's first element).
type leaf struct {
	path  string
	steps []int
	typ   reflect.Type
}

// leaves lists the leaf fields under t: fields of basic kinds, maps,
// quantities, unmodeled fields, empty structs (switches like masquerade:
// {}) and types from other packages (pod fields copied as they are).
func leaves(t reflect.Type, path string, steps []int, out *[]leaf) {
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	switch {
	case base.Kind() == reflect.Slice:
		leaves(base.Elem(), path+"[0]", append(steps[:len(steps):len(steps)], -1), out)
		return
	case base.Kind() != reflect.Struct, base == unmodeledType, base.PkgPath() != v1PkgPath, base.NumField() == 0:
		*out = append(*out, leaf{path: path, steps: steps, typ: t})
		return
	}
	for i := 0; i < base.NumField(); i++ {
		f := base.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		p := path
		if name != "" {
			p = strings.TrimPrefix(path+"."+name, ".")
		}
		leaves(f.Type, p, append(steps[:len(steps):len(steps)], i), out)
	}
}

// values are what the walk sets a leaf of type t to: something other than
// the zero value, both values of a *bool.
func values(t reflect.Type) []reflect.Value {
	if t.Kind() == reflect.Pointer {
		var out []reflect.Value
		for _, v := range values(t.Elem()) {
			p := reflect.New(t.Elem())
			p.Elem().Set(v)
			out = append(out, p)
		}
		if t.Elem().Kind() == reflect.Bool {
			p := reflect.New(t.Elem())
			out = append(out, p) // false
		}
		return out
	}
	v := reflect.New(t).Elem()
	switch {
	case t == unmodeledType:
		v.Set(reflect.ValueOf(v1.Unmodeled{Raw: []byte("{}")}))
	case t == quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("1Gi")))
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case t.Kind() == reflect.String:
		v.SetString("x")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		v.SetInt(2)
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		v.SetUint(2)
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(values(t.Key())[0], values(t.Elem())[0])
	case t.Kind() == reflect.Struct:
		// A present (pointer to, or element of) struct from another
		// package, or an empty switch: its zero value is the setting.
	default:
		return nil
	}
	return []reflect.Value{v}
}

// set walks s along steps, allocating pointers and first slice elements,
// and sets the leaf to val.
func set(s *v1.VirtualMachineInstanceSpec, steps []int, val reflect.Value) {
	v := reflect.ValueOf(s).Elem()
	for _, st := range steps {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		if st < 0 {
			if v.Len() == 0 {
				v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
			}
			v = v.Index(0)
		} else {
			v = v.Field(st)
		}
	}
	v.Set(val)
}

// names reports whether the error is about path or a field enclosing it.
func names(e *field.Error, path string) bool {
	f := e.Field
	return path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(path, f+"[")
}

// TestEveryFieldDecided walks every leaf field of the VMI spec's Go types
// (the CRD schema is generated from them) and sets it, alone, in an
// admitted VMI: unless the field is implemented, the validator must refuse
// it, naming the field. A field added to the types fails here until it is
// implemented (and listed) or refused.
func TestEveryFieldDecided(t *testing.T) {
	var all []leaf
	leaves(reflect.TypeOf(v1.VirtualMachineInstanceSpec{}), "", nil, &all)
	if len(all) < 100 {
		t.Fatalf("only %d leaves: the walk is broken", len(all))
	}
	known := map[string]bool{}
	for _, l := range all {
		known[l.path] = true
	}
	for p := range implemented {
		if !known[p] {
			t.Errorf("implemented lists %s, which is no leaf of the spec", p)
		}
	}
	for p := range honoured {
		if !known[p] {
			t.Errorf("honoured lists %s, which is no leaf of the spec", p)
		}
	}
	for _, l := range all {
		if _, ok := implemented[l.path]; ok {
			continue
		}
		vals := values(l.typ)
		if len(vals) == 0 {
			t.Errorf("%s: the walk cannot set a %s", l.path, l.typ)
			continue
		}
		for _, val := range vals {
			if h, ok := honoured[l.path]; ok && val.Elem().Bool() == h {
				continue
			}
			s := baseSpec(t)
			set(s, l.steps, val)
			refused := false
			for _, e := range validate(s, nil) {
				if names(e, "spec."+l.path) && (e.Type == field.ErrorTypeNotSupported || e.Type == field.ErrorTypeInvalid) {
					refused = true
				}
			}
			if !refused {
				t.Errorf("spec.%s set to %v is neither refused nor listed as implemented", l.path, reflect.Indirect(val))
			}
		}
	}
}
