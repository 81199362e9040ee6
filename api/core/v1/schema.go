package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// DomainSpec is the virtual hardware of a VMI.
type DomainSpec struct {
	// Resources are the requests/limits of the launcher pod's compute
	// container; memory defaults the guest memory when memory.guest is unset.
	// +optional
	Resources ResourceRequirements `json:"resources,omitempty"`
	// +optional
	CPU *CPU `json:"cpu,omitempty"`
	// +optional
	Memory *Memory `json:"memory,omitempty"`
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// +optional
	Firmware *Firmware `json:"firmware,omitempty"`
	// +optional
	Clock *Clock `json:"clock,omitempty"`
	// +optional
	Features *Features `json:"features,omitempty"`
	// Devices are the disks, NICs and other devices of the guest.
	Devices Devices `json:"devices"`
	// +optional
	IOThreadsPolicy *string `json:"ioThreadsPolicy,omitempty"`
	// +optional
	IOThreads *Unmodeled `json:"ioThreads,omitempty"`
	// +optional
	Chassis *Unmodeled `json:"chassis,omitempty"`
	// +optional
	LaunchSecurity *Unmodeled `json:"launchSecurity,omitempty"`
	// RebootPolicy: Reboot (default) or Terminate, what a guest reboot does.
	// +optional
	RebootPolicy *string `json:"rebootPolicy,omitempty"`
}

// ResourceRequirements are the compute resources of a VMI.
type ResourceRequirements struct {
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
	// OvercommitGuestOverhead leaves the launcher overhead out of the
	// pod's memory request.
	// +optional
	OvercommitGuestOverhead bool `json:"overcommitGuestOverhead,omitempty"`
}

// CPU is the vCPU layout; vCPUs = sockets * cores * threads.
type CPU struct {
	// +optional
	Cores uint32 `json:"cores,omitempty"`
	// +optional
	Sockets uint32 `json:"sockets,omitempty"`
	// +optional
	MaxSockets uint32 `json:"maxSockets,omitempty"`
	// +optional
	Threads uint32 `json:"threads,omitempty"`
	// Model: host-passthrough, host-model or a named model.
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	Features []CPUFeature `json:"features,omitempty"`
	// +optional
	DedicatedCPUPlacement bool `json:"dedicatedCpuPlacement,omitempty"`
	// +optional
	NUMA *Unmodeled `json:"numa,omitempty"`
	// +optional
	IsolateEmulatorThread bool `json:"isolateEmulatorThread,omitempty"`
	// +optional
	Realtime *Unmodeled `json:"realtime,omitempty"`
}

// CPUFeature switches one CPUID feature.
type CPUFeature struct {
	Name string `json:"name"`
	// Policy: force, require, optional, disable, forbid.
	// +optional
	Policy string `json:"policy,omitempty"`
}

// Memory is the guest memory.
type Memory struct {
	// +optional
	Hugepages *Hugepages `json:"hugepages,omitempty"`
	// Guest is the memory the guest sees; defaults to resources.requests.memory.
	// +optional
	Guest *resource.Quantity `json:"guest,omitempty"`
	// +optional
	MaxGuest *resource.Quantity `json:"maxGuest,omitempty"`
	// +optional
	ReservedOverhead *Unmodeled `json:"reservedOverhead,omitempty"`
}

// Hugepages backs guest memory with huge pages of this size.
type Hugepages struct {
	// +optional
	PageSize string `json:"pageSize,omitempty"`
}

// Machine is the emulated machine type (q35, pc, ...).
type Machine struct {
	Type string `json:"type"`
}

// Firmware is what boots the guest.
type Firmware struct {
	// UUID is the SMBIOS system UUID.
	// +optional
	UUID types.UID `json:"uuid,omitempty"`
	// +optional
	Bootloader *Bootloader `json:"bootloader,omitempty"`
	// Serial is the SMBIOS system serial number.
	// +optional
	Serial string `json:"serial,omitempty"`
	// KernelBoot boots a kernel (and initrd) taken from a container image
	// directly, without a bootloader; kubevmm's native boot path.
	// +optional
	KernelBoot *KernelBoot `json:"kernelBoot,omitempty"`
	// +optional
	ACPI *Unmodeled `json:"acpi,omitempty"`
}

// Bootloader is BIOS or EFI.
type Bootloader struct {
	// +optional
	BIOS *BIOS `json:"bios,omitempty"`
	// +optional
	EFI *EFI `json:"efi,omitempty"`
}

// BIOS firmware.
type BIOS struct {
	// +optional
	UseSerial *bool `json:"useSerial,omitempty"`
}

// EFI firmware.
type EFI struct {
	// +optional
	SecureBoot *bool `json:"secureBoot,omitempty"`
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// KernelBoot boots a Linux kernel directly.
type KernelBoot struct {
	// KernelArgs is the kernel command line.
	// +optional
	KernelArgs string `json:"kernelArgs,omitempty"`
	// Container holds the kernel and initrd.
	// +optional
	Container *KernelBootContainer `json:"container,omitempty"`
}

// KernelBootContainer is an image holding a kernel and optionally an initrd.
type KernelBootContainer struct {
	Image string `json:"image"`
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// KernelPath is the kernel's path inside the image.
	// +optional
	KernelPath string `json:"kernelPath,omitempty"`
	// InitrdPath is the initrd's path inside the image.
	// +optional
	InitrdPath string `json:"initrdPath,omitempty"`
}

// FeatureState switches a feature; absent enabled means on.
type FeatureState struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// FeatureAPIC is the APIC feature.
type FeatureAPIC struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	EndOfInterrupt bool `json:"endOfInterrupt,omitempty"`
}

// FeatureKVM controls the KVM paravirt signature.
type FeatureKVM struct {
	// +optional
	Hidden bool `json:"hidden,omitempty"`
}

// FeatureSpinlocks is the Hyper-V spinlock enlightenment.
type FeatureSpinlocks struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Retries *uint32 `json:"spinlocks,omitempty"`
}

// FeatureVendorID is the Hyper-V vendor ID.
type FeatureVendorID struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	VendorID string `json:"vendorid,omitempty"`
}

// SyNICTimer is the Hyper-V synthetic timer.
type SyNICTimer struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
}

// TLBFlush is the Hyper-V TLB flush enlightenment.
type TLBFlush struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
	// +optional
	Extended *FeatureState `json:"extended,omitempty"`
}

// FeatureHyperv are the Hyper-V enlightenments (Windows guests; QEMU path).
type FeatureHyperv struct {
	// +optional
	Relaxed *FeatureState `json:"relaxed,omitempty"`
	// +optional
	VAPIC *FeatureState `json:"vapic,omitempty"`
	// +optional
	Spinlocks *FeatureSpinlocks `json:"spinlocks,omitempty"`
	// +optional
	VPIndex *FeatureState `json:"vpindex,omitempty"`
	// +optional
	Runtime *FeatureState `json:"runtime,omitempty"`
	// +optional
	SyNIC *FeatureState `json:"synic,omitempty"`
	// +optional
	SyNICTimer *SyNICTimer `json:"synictimer,omitempty"`
	// +optional
	Reset *FeatureState `json:"reset,omitempty"`
	// +optional
	VendorID *FeatureVendorID `json:"vendorid,omitempty"`
	// +optional
	Frequencies *FeatureState `json:"frequencies,omitempty"`
	// +optional
	Reenlightenment *FeatureState `json:"reenlightenment,omitempty"`
	// +optional
	TLBFlush *TLBFlush `json:"tlbflush,omitempty"`
	// +optional
	IPI *FeatureState `json:"ipi,omitempty"`
	// +optional
	EVMCS *FeatureState `json:"evmcs,omitempty"`
}

// Clock is the guest's clock: what its RTC reads at start (utc with an
// offset, or a timezone's local time) and its timers. KubeVirt writes
// utc and timezone inline in clock; at most one of them is set.
type Clock struct {
	// UTC: the RTC reads UTC plus OffsetSeconds.
	// +optional
	UTC *ClockOffsetUTC `json:"utc,omitempty"`
	// Timezone: the RTC reads the local time of this IANA zone
	// ("Europe/Berlin"), as Windows expects.
	// +optional
	Timezone *string `json:"timezone,omitempty"`
	// +optional
	Timer *Timer `json:"timer,omitempty"`
}

// ClockOffsetUTC is an RTC in UTC, shifted.
type ClockOffsetUTC struct {
	// +optional
	OffsetSeconds *int `json:"offsetSeconds,omitempty"`
}

// Timer holds the guest's timers.
type Timer struct {
	// +optional
	HPET *HPETTimer `json:"hpet,omitempty"`
	// +optional
	KVM *KVMTimer `json:"kvm,omitempty"`
	// +optional
	PIT *PITTimer `json:"pit,omitempty"`
	// +optional
	RTC *RTCTimer `json:"rtc,omitempty"`
	// +optional
	Hyperv *HypervTimer `json:"hyperv,omitempty"`
}

// HPETTimer is the High Precision Event Timer.
type HPETTimer struct {
	// TickPolicy: delay, catchup, merge or discard.
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// Enabled (present) defaults to true.
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// KVMTimer is KVM's paravirtual clock (kvmclock).
type KVMTimer struct {
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// PITTimer is the i8254 programmable interval timer.
type PITTimer struct {
	// TickPolicy: delay, catchup or discard.
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// RTCTimer is the MC146818 real-time clock.
type RTCTimer struct {
	// TickPolicy: delay or catchup.
	// +optional
	TickPolicy string `json:"tickPolicy,omitempty"`
	// +optional
	Enabled *bool `json:"present,omitempty"`
	// Track: guest or wall, what the RTC follows.
	// +optional
	Track string `json:"track,omitempty"`
}

// HypervTimer is the Hyper-V reference time counter.
type HypervTimer struct {
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// TPMDevice is an emulated TPM 2.0.
type TPMDevice struct {
	// Enabled defaults to true; false means no TPM.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Persistent keeps the TPM's state across VM restarts.
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// Features are machine features.
type Features struct {
	// ACPI is on unless disabled; the guest powers off through it. A
	// pointer, so that admission tells "acpi: {}" from no acpi at all.
	// +optional
	ACPI *FeatureState `json:"acpi,omitempty"`
	// +optional
	APIC *FeatureAPIC `json:"apic,omitempty"`
	// +optional
	HypervPassthrough *Unmodeled `json:"hypervPassthrough,omitempty"`
	// +optional
	Hyperv *FeatureHyperv `json:"hyperv,omitempty"`
	// +optional
	SMM *FeatureState `json:"smm,omitempty"`
	// +optional
	KVM *FeatureKVM `json:"kvm,omitempty"`
	// +optional
	Pvspinlock *FeatureState `json:"pvspinlock,omitempty"`
}

// Devices are the guest's devices.
type Devices struct {
	// +optional
	UseVirtioTransitional *bool `json:"useVirtioTransitional,omitempty"`
	// +optional
	DisableHotplug bool `json:"disableHotplug,omitempty"`
	// Disks attach volumes to the guest.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Disks []Disk `json:"disks,omitempty"`
	// +optional
	Watchdog *Unmodeled `json:"watchdog,omitempty"`
	// Interfaces attach networks to the guest.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Interfaces []Interface `json:"interfaces,omitempty"`
	// +optional
	Inputs []Input `json:"inputs,omitempty"`
	// AutoattachPodInterface adds a masquerade NIC on the pod network when
	// no interfaces are listed (default true).
	// +optional
	AutoattachPodInterface *bool `json:"autoattachPodInterface,omitempty"`
	// +optional
	AutoattachGraphicsDevice *bool `json:"autoattachGraphicsDevice,omitempty"`
	// AutoattachSerialConsole adds the serial console (default true).
	// +optional
	AutoattachSerialConsole *bool `json:"autoattachSerialConsole,omitempty"`
	// +optional
	LogSerialConsole *bool `json:"logSerialConsole,omitempty"`
	// +optional
	AutoattachMemBalloon *bool `json:"autoattachMemBalloon,omitempty"`
	// +optional
	AutoattachInputDevice *bool `json:"autoattachInputDevice,omitempty"`
	// +optional
	AutoattachVSOCK *bool `json:"autoattachVSOCK,omitempty"`
	// Rng adds a virtio-rng device.
	// +optional
	Rng *Rng `json:"rng,omitempty"`
	// +optional
	BlockMultiQueue *bool `json:"blockMultiQueue,omitempty"`
	// +optional
	NetworkInterfaceMultiQueue *bool `json:"networkInterfaceMultiqueue,omitempty"`
	// +optional
	GPUs []Unmodeled `json:"gpus,omitempty"`
	// +optional
	DownwardMetrics *Unmodeled `json:"downwardMetrics,omitempty"`
	// +optional
	PanicDevices []Unmodeled `json:"panicDevices,omitempty"`
	// +optional
	Filesystems []Unmodeled `json:"filesystems,omitempty"`
	// +optional
	HostDevices []Unmodeled `json:"hostDevices,omitempty"`
	// +optional
	ClientPassthrough *Unmodeled `json:"clientPassthrough,omitempty"`
	// +optional
	Sound *Unmodeled `json:"sound,omitempty"`
	// +optional
	TPM *TPMDevice `json:"tpm,omitempty"`
	// +optional
	Video *Unmodeled `json:"video,omitempty"`
}

// Rng is a virtio random number generator; it has no settings.
type Rng struct{}

// Input is a tablet or keyboard.
type Input struct {
	// Bus: usb or virtio.
	// +optional
	Bus string `json:"bus,omitempty"`
	// Type: tablet or keyboard.
	Type string `json:"type"`
	Name string `json:"name"`
}

// DiskBus is the bus a disk sits on.
type DiskBus string

// The DiskBus values.
const (
	DiskBusVirtio DiskBus = "virtio"
	DiskBusSATA   DiskBus = "sata"
	DiskBusSCSI   DiskBus = "scsi"
	DiskBusUSB    DiskBus = "usb"
)

// Disk attaches the volume of the same name to the guest.
type Disk struct {
	// Name is also the name of the volume it attaches.
	Name string `json:"name"`
	// DiskDevice says what kind of device (disk, lun, cdrom); default disk.
	DiskDevice `json:",inline"`
	// BootOrder: lower boots first; unset disks are not boot devices.
	// +optional
	BootOrder *uint `json:"bootOrder,omitempty"`
	// Serial is the disk's serial number.
	// +optional
	Serial string `json:"serial,omitempty"`
	// +optional
	DedicatedIOThread *bool `json:"dedicatedIOThread,omitempty"`
	// Cache: none, writethrough, writeback.
	// +optional
	Cache string `json:"cache,omitempty"`
	// IO: native or threads.
	// +optional
	IO string `json:"io,omitempty"`
	// +optional
	Tag string `json:"tag,omitempty"`
	// +optional
	BlockSize *Unmodeled `json:"blockSize,omitempty"`
	// +optional
	Shareable *bool `json:"shareable,omitempty"`
	// +optional
	ErrorPolicy *string `json:"errorPolicy,omitempty"`
	// +optional
	ChangedBlockTracking *bool `json:"changedBlockTracking,omitempty"`
}

// DiskDevice is exactly one of disk, lun, cdrom.
type DiskDevice struct {
	// +optional
	Disk *DiskTarget `json:"disk,omitempty"`
	// +optional
	LUN *LunTarget `json:"lun,omitempty"`
	// +optional
	CDRom *CDRomTarget `json:"cdrom,omitempty"`
}

// DiskTarget is a plain disk.
type DiskTarget struct {
	// Bus: virtio (default), sata, scsi, usb.
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// +optional
	PciAddress string `json:"pciAddress,omitempty"`
}

// LunTarget is a SCSI LUN.
type LunTarget struct {
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// +optional
	Reservation bool `json:"reservation,omitempty"`
}

// CDRomTarget is a CD-ROM drive (read-only unless readonly: false).
type CDRomTarget struct {
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// +optional
	ReadOnly *bool `json:"readonly,omitempty"`
	// Tray: open or closed.
	// +optional
	Tray string `json:"tray,omitempty"`
}

// Interface is a guest NIC attached to the network of the same name.
type Interface struct {
	// Name is also the name of the network it attaches to.
	Name string `json:"name"`
	// Model: virtio (default), e1000, e1000e, ...
	// +optional
	Model string `json:"model,omitempty"`
	// InterfaceBindingMethod is how the NIC is wired to the pod's network.
	InterfaceBindingMethod `json:",inline"`
	// +optional
	Binding *PluginBinding `json:"binding,omitempty"`
	// Ports (masquerade) forwards only these ports; all when empty.
	// +optional
	Ports []Port `json:"ports,omitempty"`
	// +optional
	PortRanges []Unmodeled `json:"portRanges,omitempty"`
	// +optional
	MacAddress string `json:"macAddress,omitempty"`
	// +optional
	BootOrder *uint `json:"bootOrder,omitempty"`
	// +optional
	PciAddress string `json:"pciAddress,omitempty"`
	// +optional
	DHCPOptions *Unmodeled `json:"dhcpOptions,omitempty"`
	// +optional
	Tag string `json:"tag,omitempty"`
	// +optional
	ACPIIndex int `json:"acpiIndex,omitempty"`
	// State: up, down or absent.
	// +optional
	State string `json:"state,omitempty"`
}

// InterfaceBindingMethod is exactly one of its fields.
type InterfaceBindingMethod struct {
	// +optional
	Bridge *InterfaceBridge `json:"bridge,omitempty"`
	// +optional
	Slirp *InterfaceSlirp `json:"slirp,omitempty"`
	// +optional
	Masquerade *InterfaceMasquerade `json:"masquerade,omitempty"`
	// +optional
	SRIOV *InterfaceSRIOV `json:"sriov,omitempty"`
	// +optional
	Macvtap *InterfaceMacvtap `json:"macvtap,omitempty"`
	// +optional
	Passt *InterfacePasst `json:"passt,omitempty"`
	// +optional
	PasstBinding *InterfacePasstBinding `json:"passtBinding,omitempty"`
}

// InterfaceBridge bridges the NIC to the pod interface (the guest gets the pod IP).
type InterfaceBridge struct{}

// InterfaceMasquerade NATs the guest behind the pod IP.
type InterfaceMasquerade struct{}

// InterfaceSlirp is the deprecated user-mode network.
type InterfaceSlirp struct{}

// InterfaceSRIOV passes through an SR-IOV VF.
type InterfaceSRIOV struct{}

// InterfaceMacvtap is the deprecated macvtap binding.
type InterfaceMacvtap struct{}

// InterfacePasst is the deprecated passt binding.
type InterfacePasst struct{}

// InterfacePasstBinding is the passt binding.
type InterfacePasstBinding struct{}

// PluginBinding names a network binding plugin.
type PluginBinding struct {
	Name string `json:"name"`
}

// Port is one forwarded port.
type Port struct {
	// +optional
	Name string `json:"name,omitempty"`
	// Protocol: TCP (default) or UDP.
	// +optional
	Protocol string `json:"protocol,omitempty"`
	Port     int32  `json:"port"`
}

// Network is what an interface of the same name attaches to.
type Network struct {
	Name          string `json:"name"`
	NetworkSource `json:",inline"`
}

// NetworkSource is exactly one of pod, multus.
type NetworkSource struct {
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`
	// +optional
	Multus *MultusNetwork `json:"multus,omitempty"`
	// +optional
	ResourceClaim *Unmodeled `json:"resourceClaim,omitempty"`
}

// PodNetwork is the pod's own network.
type PodNetwork struct {
	// VMNetworkCIDR is the guest-side network for masquerade (default 10.0.2.0/24).
	// +optional
	VMNetworkCIDR string `json:"vmNetworkCIDR,omitempty"`
	// +optional
	VMIPv6NetworkCIDR string `json:"vmIPv6NetworkCIDR,omitempty"`
}

// MultusNetwork is a secondary network from a NetworkAttachmentDefinition.
type MultusNetwork struct {
	// NetworkName is <name> or <namespace>/<name> of the attachment.
	NetworkName string `json:"networkName"`
	// +optional
	Default bool `json:"default,omitempty"`
}

// Volume is a named backing store for a disk.
type Volume struct {
	// Name is also the name of the disk that attaches it.
	Name         string `json:"name"`
	VolumeSource `json:",inline"`
}

// VolumeSource is exactly one of its fields.
type VolumeSource struct {
	// +optional
	HostDisk *HostDisk `json:"hostDisk,omitempty"`
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// +optional
	CloudInitNoCloud *CloudInitNoCloudSource `json:"cloudInitNoCloud,omitempty"`
	// +optional
	CloudInitConfigDrive *CloudInitConfigDriveSource `json:"cloudInitConfigDrive,omitempty"`
	// +optional
	Sysprep *Unmodeled `json:"sysprep,omitempty"`
	// +optional
	ContainerDisk *ContainerDiskSource `json:"containerDisk,omitempty"`
	// +optional
	Ephemeral *EphemeralVolumeSource `json:"ephemeral,omitempty"`
	// +optional
	EmptyDisk *EmptyDiskSource `json:"emptyDisk,omitempty"`
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`
	// +optional
	ConfigMap *Unmodeled `json:"configMap,omitempty"`
	// +optional
	Secret *Unmodeled `json:"secret,omitempty"`
	// +optional
	DownwardAPI *Unmodeled `json:"downwardAPI,omitempty"`
	// +optional
	ServiceAccount *Unmodeled `json:"serviceAccount,omitempty"`
	// +optional
	DownwardMetrics *Unmodeled `json:"downwardMetrics,omitempty"`
	// +optional
	MemoryDump *Unmodeled `json:"memoryDump,omitempty"`
	// +optional
	ContainerPath *Unmodeled `json:"containerPath,omitempty"`
}

// PersistentVolumeClaimVolumeSource is a PVC used as a disk.
type PersistentVolumeClaimVolumeSource struct {
	// ClaimName is the PVC in the VMI's namespace.
	ClaimName string `json:"claimName"`
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// +optional
	Name string `json:"name,omitempty"`
}

// CloudInitNoCloudSource is cloud-init data served as a NoCloud disk.
type CloudInitNoCloudSource struct {
	// UserDataSecretRef names a Secret whose userdata key is the user data.
	// +optional
	UserDataSecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// +optional
	UserData string `json:"userData,omitempty"`
	// +optional
	NetworkDataSecretRef *LocalObjectReference `json:"networkDataSecretRef,omitempty"`
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`
	// +optional
	NetworkData string `json:"networkData,omitempty"`
}

// CloudInitConfigDriveSource is cloud-init data served as a ConfigDrive.
type CloudInitConfigDriveSource struct {
	// +optional
	UserDataSecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// +optional
	UserData string `json:"userData,omitempty"`
	// +optional
	NetworkDataSecretRef *LocalObjectReference `json:"networkDataSecretRef,omitempty"`
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`
	// +optional
	NetworkData string `json:"networkData,omitempty"`
}

// AccessCredential is one credential put into the guest.
type AccessCredential struct {
	// +optional
	SSHPublicKey *SSHPublicKeyAccessCredential `json:"sshPublicKey,omitempty"`
	// +optional
	UserPassword *Unmodeled `json:"userPassword,omitempty"`
}

// SSHPublicKeyAccessCredential is the SSH public keys of a Secret (every
// key of it holds one), and how they reach the guest.
type SSHPublicKeyAccessCredential struct {
	Source            SSHPublicKeyAccessCredentialSource            `json:"source"`
	PropagationMethod SSHPublicKeyAccessCredentialPropagationMethod `json:"propagationMethod"`
}

// SSHPublicKeyAccessCredentialSource is where the keys come from.
type SSHPublicKeyAccessCredentialSource struct {
	// +optional
	Secret *AccessCredentialSecretSource `json:"secret,omitempty"`
}

// AccessCredentialSecretSource names a Secret in the VMI's namespace.
type AccessCredentialSecretSource struct {
	SecretName string `json:"secretName"`
}

// SSHPublicKeyAccessCredentialPropagationMethod is exactly one of its
// fields: the cloud-init volume's metadata (public keys) or the guest agent.
type SSHPublicKeyAccessCredentialPropagationMethod struct {
	// +optional
	ConfigDrive *ConfigDriveSSHPublicKeyAccessCredentialPropagation `json:"configDrive,omitempty"`
	// +optional
	NoCloud *NoCloudSSHPublicKeyAccessCredentialPropagation `json:"noCloud,omitempty"`
	// +optional
	QemuGuestAgent *Unmodeled `json:"qemuGuestAgent,omitempty"`
}

// ConfigDriveSSHPublicKeyAccessCredentialPropagation puts the keys into the
// ConfigDrive's meta_data.json (public_keys).
type ConfigDriveSSHPublicKeyAccessCredentialPropagation struct{}

// NoCloudSSHPublicKeyAccessCredentialPropagation puts the keys into the
// NoCloud meta-data (public-keys).
type NoCloudSSHPublicKeyAccessCredentialPropagation struct{}

// ContainerDiskSource is a disk image shipped in a container image; writes
// go to an ephemeral overlay and are lost when the VMI ends.
type ContainerDiskSource struct {
	Image string `json:"image"`
	// +optional
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// Path of the image file inside the container image; default: the
	// single file under /disk.
	// +optional
	Path string `json:"path,omitempty"`
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// HostDiskType says whether a hostDisk's image must exist.
type HostDiskType string

// The HostDiskType values.
const (
	// HostDiskExists: the image must be there.
	HostDiskExists HostDiskType = "Disk"
	// HostDiskExistsOrCreate: a sparse image of the capacity is created
	// when absent.
	HostDiskExistsOrCreate HostDiskType = "DiskOrCreate"
)

// HostDisk is a raw disk image in the node's file system.
type HostDisk struct {
	// Path is the image's absolute path on the node.
	Path string `json:"path"`
	// Type is Disk or DiskOrCreate.
	Type HostDiskType `json:"type"`
	// Capacity is the size of the image DiskOrCreate creates.
	// +optional
	Capacity resource.Quantity `json:"capacity,omitempty"`
	// Shared says the path holds the same image on every node (shared
	// storage): only then can the VMI live-migrate.
	// +optional
	Shared *bool `json:"shared,omitempty"`
}

// EphemeralVolumeSource is a PVC the guest sees through a copy-on-write
// overlay, discarded when the VMI ends: the claim itself is never written.
type EphemeralVolumeSource struct {
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
}

// EmptyDiskSource is a blank sparse disk that lives as long as the VMI.
type EmptyDiskSource struct {
	Capacity resource.Quantity `json:"capacity"`
}

// DataVolumeSource is a CDI DataVolume used as a disk.
type DataVolumeSource struct {
	Name string `json:"name"`
	// +optional
	Hotpluggable bool `json:"hotpluggable,omitempty"`
}
