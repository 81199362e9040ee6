package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// VirtualMachineInstancetype is a namespaced instance type: the size
// (vCPUs, memory) of the VMs that name it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstancetypes,singular=virtualmachineinstancetype,shortName=vminstancetype;vminstancetypes;vmf;vmfs,categories=all
// +kubebuilder:storageversion
type VirtualMachineInstancetype struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineInstancetypeSpec `json:"spec"`
}

// VirtualMachineInstancetypeList is a list of VirtualMachineInstancetypes.
//
// +kubebuilder:object:root=true
type VirtualMachineInstancetypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstancetype `json:"items"`
}

// VirtualMachineClusterInstancetype is a cluster-wide instance type.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineclusterinstancetypes,singular=virtualmachineclusterinstancetype,scope=Cluster,shortName=vmclusterinstancetype;vmclusterinstancetypes;vmcf;vmcfs
// +kubebuilder:storageversion
type VirtualMachineClusterInstancetype struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineInstancetypeSpec `json:"spec"`
}

// VirtualMachineClusterInstancetypeList is a list of VirtualMachineClusterInstancetypes.
//
// +kubebuilder:object:root=true
type VirtualMachineClusterInstancetypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineClusterInstancetype `json:"items"`
}

// VirtualMachineInstancetypeSpec is what an instance type gives the VMs
// that name it; a VM that also sets one of these in its template is refused.
type VirtualMachineInstancetypeSpec struct {
	// NodeSelector becomes the VMI's; a VM that sets its own conflicts.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
	// CPU: the guest's vCPUs.
	CPU CPUInstancetype `json:"cpu"`
	// Memory: the guest's memory.
	Memory MemoryInstancetype `json:"memory"`
	// +optional
	GPUs []v1.Unmodeled `json:"gpus,omitempty"`
	// +optional
	HostDevices []v1.Unmodeled `json:"hostDevices,omitempty"`
	// +optional
	IOThreadsPolicy *string `json:"ioThreadsPolicy,omitempty"`
	// +optional
	IOThreads *v1.Unmodeled `json:"ioThreads,omitempty"`
	// +optional
	LaunchSecurity *v1.Unmodeled `json:"launchSecurity,omitempty"`
	// Annotations are added to the VMI where it does not set them.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CPUInstancetype is the guest's CPU.
type CPUInstancetype struct {
	// Guest is the number of vCPUs; the preference's topology says how
	// they are laid out.
	// +kubebuilder:validation:Minimum=1
	Guest uint32 `json:"guest"`
	// +optional
	Model *string `json:"model,omitempty"`
	// +optional
	DedicatedCPUPlacement *bool `json:"dedicatedCPUPlacement,omitempty"`
	// +optional
	NUMA *v1.Unmodeled `json:"numa,omitempty"`
	// +optional
	IsolateEmulatorThread *bool `json:"isolateEmulatorThread,omitempty"`
	// +optional
	Realtime *v1.Unmodeled `json:"realtime,omitempty"`
	// +optional
	MaxSockets *uint32 `json:"maxSockets,omitempty"`
}

// MemoryInstancetype is the guest's memory.
type MemoryInstancetype struct {
	// Guest is the memory the guest sees.
	Guest resource.Quantity `json:"guest"`
	// +optional
	Hugepages *v1.Unmodeled `json:"hugepages,omitempty"`
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:validation:Minimum=0
	// +optional
	OvercommitPercent int `json:"overcommitPercent,omitempty"`
	// +optional
	MaxGuest *resource.Quantity `json:"maxGuest,omitempty"`
}

// VirtualMachinePreference is a namespaced preference: defaults for what
// a VM leaves unset.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachinepreferences,singular=virtualmachinepreference,shortName=vmpref;vmprefs;vmp;vmps,categories=all
// +kubebuilder:storageversion
type VirtualMachinePreference struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachinePreferenceSpec `json:"spec"`
}

// VirtualMachinePreferenceList is a list of VirtualMachinePreferences.
//
// +kubebuilder:object:root=true
type VirtualMachinePreferenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachinePreference `json:"items"`
}

// VirtualMachineClusterPreference is a cluster-wide preference.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineclusterpreferences,singular=virtualmachineclusterpreference,scope=Cluster,shortName=vmcp;vmcps
// +kubebuilder:storageversion
type VirtualMachineClusterPreference struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachinePreferenceSpec `json:"spec"`
}

// VirtualMachineClusterPreferenceList is a list of VirtualMachineClusterPreferences.
//
// +kubebuilder:object:root=true
type VirtualMachineClusterPreferenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineClusterPreference `json:"items"`
}

// VirtualMachinePreferenceSpec holds the preferred values; each is applied to the VMI
// only where the VM leaves the field unset.
type VirtualMachinePreferenceSpec struct {
	// +optional
	Clock *ClockPreferences `json:"clock,omitempty"`
	// +optional
	CPU *CPUPreferences `json:"cpu,omitempty"`
	// +optional
	Devices *DevicePreferences `json:"devices,omitempty"`
	// +optional
	Features *FeaturePreferences `json:"features,omitempty"`
	// +optional
	Firmware *FirmwarePreferences `json:"firmware,omitempty"`
	// +optional
	Machine *MachinePreferences `json:"machine,omitempty"`
	// +optional
	Volumes *VolumePreferences `json:"volumes,omitempty"`
	// +optional
	PreferredSubdomain *string `json:"preferredSubdomain,omitempty"`
	// +optional
	PreferredTerminationGracePeriodSeconds *int64 `json:"preferredTerminationGracePeriodSeconds,omitempty"`
	// Requirements: the least CPU and memory a VM using the preference
	// must have; a VM with less is refused.
	// +optional
	Requirements *PreferenceRequirements `json:"requirements,omitempty"`
	// Annotations are added to the VMI where it does not set them.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// +optional
	PreferSpreadSocketToCoreRatio uint32 `json:"preferSpreadSocketToCoreRatio,omitempty"`
	// +optional
	PreferredArchitecture *string `json:"preferredArchitecture,omitempty"`
	// +optional
	PreferredLaunchSecurity *v1.Unmodeled `json:"preferredLaunchSecurity,omitempty"`
}

// PreferredCPUTopology says how an instance type's vCPUs are laid out.
// +kubebuilder:validation:Enum=sockets;cores;threads;spread;any;preferSockets;preferCores;preferThreads;preferSpread;preferAny
type PreferredCPUTopology string

// The PreferredCPUTopology values; the prefer* spellings are the
// deprecated ones KubeVirt still takes.
const (
	Sockets                 PreferredCPUTopology = "sockets"
	Cores                   PreferredCPUTopology = "cores"
	Threads                 PreferredCPUTopology = "threads"
	Spread                  PreferredCPUTopology = "spread"
	Any                     PreferredCPUTopology = "any"
	DeprecatedPreferSockets PreferredCPUTopology = "preferSockets"
	DeprecatedPreferCores   PreferredCPUTopology = "preferCores"
	DeprecatedPreferThreads PreferredCPUTopology = "preferThreads"
	DeprecatedPreferSpread  PreferredCPUTopology = "preferSpread"
	DeprecatedPreferAny     PreferredCPUTopology = "preferAny"
)

// CPUPreferences lay out the instance type's vCPUs.
type CPUPreferences struct {
	// +optional
	PreferredCPUTopology *PreferredCPUTopology `json:"preferredCPUTopology,omitempty"`
	// +optional
	SpreadOptions *SpreadOptions `json:"spreadOptions,omitempty"`
	// +optional
	PreferredCPUFeatures []v1.Unmodeled `json:"preferredCPUFeatures,omitempty"`
}

// SpreadAcross is what the spread topology spreads vCPUs over.
// +kubebuilder:validation:Enum=SocketsCores;CoresThreads;SocketsCoresThreads
type SpreadAcross string

// The SpreadAcross values.
const (
	SpreadAcrossSocketsCores        SpreadAcross = "SocketsCores"
	SpreadAcrossCoresThreads        SpreadAcross = "CoresThreads"
	SpreadAcrossSocketsCoresThreads SpreadAcross = "SocketsCoresThreads"
)

// SpreadOptions tune the spread topology.
type SpreadOptions struct {
	// +optional
	Across *SpreadAcross `json:"across,omitempty"`
	// +optional
	Ratio *uint32 `json:"ratio,omitempty"`
}

// DevicePreferences are defaults for the VMI's devices.
type DevicePreferences struct {
	// +optional
	PreferredAutoattachGraphicsDevice *bool `json:"preferredAutoattachGraphicsDevice,omitempty"`
	// +optional
	PreferredAutoattachMemBalloon *bool `json:"preferredAutoattachMemBalloon,omitempty"`
	// +optional
	PreferredAutoattachPodInterface *bool `json:"preferredAutoattachPodInterface,omitempty"`
	// +optional
	PreferredAutoattachSerialConsole *bool `json:"preferredAutoattachSerialConsole,omitempty"`
	// +optional
	PreferredAutoattachInputDevice *bool `json:"preferredAutoattachInputDevice,omitempty"`
	// +optional
	PreferredDisableHotplug *bool `json:"preferredDisableHotplug,omitempty"`
	// +optional
	PreferredVirtualGPUOptions *v1.Unmodeled `json:"preferredVirtualGPUOptions,omitempty"`
	// +optional
	PreferredSoundModel string `json:"preferredSoundModel,omitempty"`
	// +optional
	PreferredUseVirtioTransitional *bool `json:"preferredUseVirtioTransitional,omitempty"`
	// +optional
	PreferredInputBus string `json:"preferredInputBus,omitempty"`
	// +optional
	PreferredInputType string `json:"preferredInputType,omitempty"`
	// +optional
	PreferredDiskBus v1.DiskBus `json:"preferredDiskBus,omitempty"`
	// +optional
	PreferredLunBus v1.DiskBus `json:"preferredLunBus,omitempty"`
	// +optional
	PreferredCdromBus v1.DiskBus `json:"preferredCdromBus,omitempty"`
	// +optional
	PreferredDiskDedicatedIoThread *bool `json:"preferredDiskDedicatedIoThread,omitempty"`
	// +optional
	PreferredDiskCache string `json:"preferredDiskCache,omitempty"`
	// +optional
	PreferredDiskIO string `json:"preferredDiskIO,omitempty"`
	// +optional
	PreferredDiskBlockSize *v1.Unmodeled `json:"preferredDiskBlockSize,omitempty"`
	// +optional
	PreferredInterfaceModel string `json:"preferredInterfaceModel,omitempty"`
	// +optional
	PreferredRng *v1.Rng `json:"preferredRng,omitempty"`
	// +optional
	PreferredBlockMultiQueue *bool `json:"preferredBlockMultiQueue,omitempty"`
	// +optional
	PreferredNetworkInterfaceMultiQueue *bool `json:"preferredNetworkInterfaceMultiQueue,omitempty"`
	// +optional
	PreferredTPM *v1.TPMDevice `json:"preferredTPM,omitempty"`
	// +optional
	PreferredInterfaceMasquerade *v1.InterfaceMasquerade `json:"preferredInterfaceMasquerade,omitempty"`
	// +optional
	PreferredPanicDeviceModel *string `json:"preferredPanicDeviceModel,omitempty"`
	// +optional
	PreferredVideoType *string `json:"preferredVideoType,omitempty"`
}

// FeaturePreferences are defaults for the VMI's machine features.
type FeaturePreferences struct {
	// +optional
	PreferredAcpi *v1.FeatureState `json:"preferredAcpi,omitempty"`
	// +optional
	PreferredApic *v1.FeatureAPIC `json:"preferredApic,omitempty"`
	// +optional
	PreferredHyperv *v1.FeatureHyperv `json:"preferredHyperv,omitempty"`
	// +optional
	PreferredKvm *v1.FeatureKVM `json:"preferredKvm,omitempty"`
	// +optional
	PreferredPvspinlock *v1.FeatureState `json:"preferredPvspinlock,omitempty"`
	// +optional
	PreferredSmm *v1.FeatureState `json:"preferredSmm,omitempty"`
}

// FirmwarePreferences are defaults for the VMI's bootloader.
type FirmwarePreferences struct {
	// +optional
	PreferredUseBios *bool `json:"preferredUseBios,omitempty"`
	// +optional
	PreferredUseBiosSerial *bool `json:"preferredUseBiosSerial,omitempty"`
	// PreferredUseEfi is KubeVirt's older spelling of preferredEfi.
	// +optional
	PreferredUseEfi *bool `json:"preferredUseEfi,omitempty"`
	// PreferredUseSecureBoot is KubeVirt's older spelling of
	// preferredEfi.secureBoot.
	// +optional
	PreferredUseSecureBoot *bool `json:"preferredUseSecureBoot,omitempty"`
	// +optional
	PreferredEfi *v1.EFI `json:"preferredEfi,omitempty"`
}

// MachinePreferences is the preferred machine type.
type MachinePreferences struct {
	// +optional
	PreferredMachineType string `json:"preferredMachineType,omitempty"`
}

// VolumePreferences is the storage class of the VM's DataVolumes.
type VolumePreferences struct {
	// +optional
	PreferredStorageClassName string `json:"preferredStorageClassName,omitempty"`
}

// ClockOffset is KubeVirt's clock offset: utc or timezone.
type ClockOffset struct {
	// +optional
	UTC *v1.ClockOffsetUTC `json:"utc,omitempty"`
	// +optional
	Timezone *string `json:"timezone,omitempty"`
}

// ClockPreferences are defaults for the VMI's clock.
type ClockPreferences struct {
	// +optional
	PreferredClockOffset *ClockOffset `json:"preferredClockOffset,omitempty"`
	// +optional
	PreferredTimer *v1.Timer `json:"preferredTimer,omitempty"`
}

// PreferenceRequirements are the least a VM must have.
type PreferenceRequirements struct {
	// +optional
	CPU *CPUPreferenceRequirement `json:"cpu,omitempty"`
	// +optional
	Memory *MemoryPreferenceRequirement `json:"memory,omitempty"`
	// +optional
	Architecture *string `json:"architecture,omitempty"`
}

// CPUPreferenceRequirement is the least number of vCPUs.
type CPUPreferenceRequirement struct {
	Guest uint32 `json:"guest"`
}

// MemoryPreferenceRequirement is the least guest memory.
type MemoryPreferenceRequirement struct {
	Guest resource.Quantity `json:"guest"`
}
