package fields

// Implemented are the leaves of a VMI spec that kubevmm honours, with
// where. Each is admitted and changes what virt-api, virt-controller or
// the launcher renders from the VMI, or a named test checks what it does
// (implemented_test.go); every other leaf is refused by virt-api, naming
// it or a field enclosing it (virtapi TestEveryFieldDecided), unless
// Honoured or Defaults accept it.
var Implemented = map[string]string{
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

	"domain.resources.requests":                "the compute container's requests, memory plus overhead (controller.launcherResources); memory is the guest's when memory.guest is unset (vmispec.GuestMemory)",
	"domain.resources.limits":                  "the compute container's limits, memory plus overhead",
	"domain.resources.overcommitGuestOverhead": "leaves the overhead out of the memory request (controller.launcherResources)",
	"domain.cpu.cores":                         "the vCPU count (vmispec.VCPUs); the guest sees one socket of that many cores",
	"domain.memory.guest":                      "the guest's RAM (vmispec.GuestMemory)",

	"domain.firmware.kernelBoot.kernelArgs":                "the kernel command line (launcher.BuildVMConfig)",
	"domain.firmware.kernelBoot.container.image":           "the kernel-boot init container (controller.bootFileContainers)",
	"domain.firmware.kernelBoot.container.imagePullSecret": "the pod's imagePullSecrets",
	"domain.firmware.kernelBoot.container.imagePullPolicy": "the kernel-boot init container",
	"domain.firmware.kernelBoot.container.kernelPath":      "copied out of the image; the kernel booted",
	"domain.firmware.kernelBoot.container.initrdPath":      "copied out of the image; the initrd",

	"domain.devices.disableHotplug":             "addvolume refuses a VMI (or VM) that sets it (virtapi/hotplug.go)",
	"domain.devices.autoattachPodInterface":     "the mutating webhook adds the pod NIC only when it is not false (defaultSpec)",
	"domain.devices.rng":                        "a virtio-rng device on our VMM (launcher.VMConfig.RNG); QEMU gets none, a known gap (implemented_test.go)",
	"domain.devices.autoattachVSOCK":            "a cluster-unique status.VSOCKCID for the guest's vsock device (controller.assignVSOCKCID) and the vsock subresource, on our VMM; refused on QEMU, which has no vsock device",
	"domain.devices.blockMultiQueue":            "a request queue per vCPU for each virtio disk (vmispec.DiskQueues), on both backends",
	"domain.devices.networkInterfaceMultiqueue": "a multi-queue tap and a queue pair per vCPU for virtio NICs (vmispec.NICQueues), on both backends",
	"domain.devices.tpm":                        "{}: a TPM 2.0 on QEMU (vmispec.TPMEnabled)",
	"domain.devices.tpm.enabled":                "a TPM 2.0 on QEMU: swtpm, state in the launcher pod (launcher/qemu Config.TPM); false: none",

	"domain.clock.utc.offsetSeconds":    "the RTC's offset from host UTC (vmispec.RTCOffset): the kubevmm VMM's RTC, QEMU's -rtc base",
	"domain.clock.timezone":             "the RTC reads the zone's local time (vmispec.RTCOffset)",
	"domain.clock.timer.hpet":           "{}: QEMU's HPET, as present: true",
	"domain.clock.timer.hpet.present":   "true: QEMU's HPET (vmispec.NeedsQEMU); false: none (the kubevmm VMM has none, QEMU's -machine hpet=off)",
	"domain.clock.timer.kvm.present":    "true: kvmclock (both backends; not under TCG); false: QEMU's -cpu kvmclock=off",
	"domain.clock.timer.hyperv":         "{}: QEMU's hv-time, as present: true",
	"domain.clock.timer.hyperv.present": "true: QEMU's hv-time; false: without it",
	"domain.clock.timer.pit.tickPolicy": "delay only: KVM's in-kernel PIT (QEMU: kvm-pit.lost_tick_policy=delay)",
	"domain.clock.timer.rtc.tickPolicy": "catchup: QEMU's -rtc driftfix=slew; delay: both backends",
	"domain.clock.timer.rtc.track":      "guest: QEMU's -rtc clock=vm; wall: both backends",

	"domain.features.hyperv": "{}: QEMU with its fixed set of Hyper-V enlightenments (launcher/qemu Config.HyperV)",

	"domain.firmware.bootloader.efi":            "{}: QEMU with OVMF, secure boot on (KubeVirt's default; needs features.smm)",
	"domain.firmware.uuid":                      "QEMU's -uuid, the SMBIOS system UUID (vmispec.NeedsQEMU: the kubevmm VMM has no SMBIOS)",
	"domain.firmware.bootloader.efi.secureBoot": "true (KubeVirt's default): QEMU with OVMF's secure-boot build and SMM (launcher/qemu Config.SecureBoot), needs features.smm; false: OVMF without it",

	"domain.devices.disks[0].name":          "the volume it attaches",
	"domain.devices.disks[0].disk.readonly": "a read-only virtio-blk disk (refused on SATA: QEMU's are writable)",
	"domain.devices.disks[0].cdrom":         "{}: a SATA CD-ROM on QEMU",
	"domain.devices.disks[0].bootOrder":     "QEMU's bootindex (launcher/qemu); on our VMM the disk whose Linux boot entry a disk boot reads (vmispec.BootDisk)",
	"domain.devices.disks[0].serial":        "the virtio-blk (or SATA) serial, up to 20 characters",

	"domain.devices.interfaces[0].name":              "the network it attaches",
	"domain.devices.interfaces[0].masquerade":        "a tap NATed behind the pod IP (handler network, vmispec.PodNICs)",
	"domain.devices.interfaces[0].macAddress":        "the NIC's MAC (vmispec.PodNIC.MACFor)",
	"domain.devices.interfaces[0].bridge":            "on the pod network: the guest takes the pod's IP by the launcher's DHCP; on a multus network: the tap and the pod's interface on one in-pod bridge (handler bridge.go)",
	"domain.devices.interfaces[0].state":             "down: the virtio-net link status bit clear (vnet.Config.LinkDown), on our VMM; refused on QEMU",
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
	"volumes[0].dataVolume.name":                    "the claim of the DataVolume's name, once CDI has filled it (controller/datavolumes.go, vmispec.VolumeClaim)",
	"volumes[0].dataVolume.hotpluggable":            "a hot-plugged volume: a SCSI disk, checked as addvolume checks it (virtapi/hotplug.go), left out of the launcher pod",
	"volumes[0].emptyDisk.capacity":                 "the sparse image's size (launcher/volumes.go)",
	"volumes[0].ephemeral.persistentVolumeClaim":    "the claim mounted read-only, the backing file of a qcow2 overlay in the pod (launcher/volumes.go)",
	"volumes[0].hostDisk.path":                      "a hostPath volume of its directory (controller/volumes.go), the image in it",
	"volumes[0].hostDisk.type":                      "Disk: the image must exist; DiskOrCreate: created sparse (launcher/volumes.go)",
	"volumes[0].hostDisk.capacity":                  "the size of the image DiskOrCreate creates",
	"volumes[0].hostDisk.shared":                    "LiveMigratable (api/vmispec/volumes.go)",

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

// Honoured are leaves accepted at one value only, the one that says what
// kubevmm does anyway (or, for machine.type, the one it is defaulted to);
// any other value is refused.
var Honoured = map[string]any{
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

	// What the mutating webhook gives a VMI without one (KubeVirt's
	// default), and the machine the QEMU backend runs; our VMM runs its
	// own (virtio-mmio, no PCI). KubeVirt reports the machine it chose in
	// status.machine; kubevmm does not (issue 35).
	"domain.machine.type": "q35",
}

// Defaults are presence leaves whose {} is accepted and does nothing of
// its own: a group of settings, or a switch whose {} says what kubevmm
// does anyway. Their fields are leaves of their own, decided one by one.
var Defaults = map[string]string{
	"domain.cpu":                      "a group: the default topology",
	"domain.memory":                   "a group: guest memory from the resources",
	"domain.machine":                  "a group: the webhook sets the type",
	"domain.firmware":                 "a group",
	"domain.firmware.bootloader":      "a group: the default firmware",
	"domain.firmware.bootloader.bios": "BIOS, KubeVirt's default: QEMU's SeaBIOS; our VMM boots the kernel itself",
	"domain.clock":                    "a group: the RTC in UTC",
	"domain.clock.utc":                "the RTC in UTC, offset 0: as without a clock",
	"domain.clock.timer":              "a group",
	"domain.clock.timer.kvm":          "present: kvmclock, which both backends give",
	"domain.clock.timer.pit":          "present: the PIT, which both backends have",
	"domain.clock.timer.rtc":          "present: the RTC, which both backends have",
	"domain.features":                 "a group",
	"domain.features.acpi":            "enabled: both backends have ACPI",
	"domain.features.apic":            "enabled: both backends have an APIC",
	"domain.features.kvm":             "hidden: false, as without it",
	"domain.devices.disks[0].disk":    "the default device kind, a virtio disk",
	"networks[0].pod":                 "the pod network with the default vmNetworkCIDR",

	// Enabled, within the fixed set QEMU is given (features.hyperv).
	"domain.features.hyperv.relaxed":     "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.vapic":       "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.spinlocks":   "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.vpindex":     "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.runtime":     "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.synic":       "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.synictimer":  "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.reset":       "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.frequencies": "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.tlbflush":    "enabled, as QEMU is given it with features.hyperv",
	"domain.features.hyperv.ipi":         "enabled, as QEMU is given it with features.hyperv",
}

// VMImplemented are the leaves of a VirtualMachine's spec outside its
// template (walked as a VMI's) that kubevmm honours, and the test that
// checks what each does: virt-controller acts on them, not a rendering.
// Every other leaf is refused (virtapi TestEveryVMFieldDecided).
var VMImplemented = map[string]Claim{
	"running":                         {"true: runStrategy Always, false: Halted (controller.VMReconciler)", "controller.TestVMHaltedRemovesVMI"},
	"runStrategy":                     {"Always, Halted, Manual, RerunOnFailure, Once (controller.VMReconciler)", "controller.TestRunStrategiesOnVMIEnd"},
	"instancetype.name":               {"the instance type the VMI is expanded with (controller/instancetype.go)", "controller.TestVMInstancetypeRevisions"},
	"instancetype.kind":               {"a namespaced or cluster-wide instance type", "controller.TestVMInstancetypeRevisions"},
	"instancetype.revisionName":       {"the ControllerRevision of the instance type the VM runs with", "controller.TestVMInstancetypeRevisions"},
	"preference.name":                 {"the preference whose values fill what the template leaves unset", "controller.TestVMInstancetypeRevisions"},
	"preference.kind":                 {"a namespaced or cluster-wide preference", "controller.TestVMInstancetypeRevisions"},
	"preference.revisionName":         {"the ControllerRevision of the preference the VM runs with", "controller.TestVMInstancetypeRevisions"},
	"dataVolumeTemplates[0].metadata": {"the DataVolume's name, labels and annotations (controller.dataVolumeFromTemplate)", "controller.TestDataVolumeFromTemplate"},
	"dataVolumeTemplates[0].spec":     {"the DataVolume's spec, checked by CDI's rules (virtapi validateDataVolumeSpec)", "controller.TestVMDataVolumeTemplates"},
}

// VMHonoured are VM leaves accepted at one value only, as Honoured.
var VMHonoured = map[string]any{
	"dataVolumeTemplates[0].apiVersion": "cdi.kubevirt.io/v1beta1",
	"dataVolumeTemplates[0].kind":       "DataVolume",
}

// VMDefaults are VM leaves accepted as {} that do nothing, as Defaults.
var VMDefaults = map[string]string{
	"dataVolumeTemplates[0].status": "KubeVirt's DataVolumeTemplateDummyStatus, kept for an older API and ignored by KubeVirt too: a template's status describes nothing",
}

// MigrationImplemented are the leaves of a VirtualMachineInstanceMigration's
// spec kubevmm honours, and the test that checks each; every other leaf is
// refused (virtapi TestEveryMigrationFieldDecided).
var MigrationImplemented = map[string]Claim{
	"vmiName":           {"the VMI migrated (controller.MigrationReconciler)", "controller.TestMigrationTargetPod"},
	"addedNodeSelector": {"added to the target pod's nodeSelector (controller.RenderMigrationTargetPod)", "controller.TestMigrationTargetPod"},
}

// Claim is where a field acts, and the test that checks it: the folder
// of its package and the test function, "controller.TestX".
type Claim struct {
	Where string
	Test  string
}
