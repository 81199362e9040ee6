package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Unmodeled is the JSON of a KubeVirt field kubevmm knows by name but does
// not implement. Declaring it keeps the API server from pruning the field,
// so admission can refuse the object with a message naming it.
type Unmodeled = runtime.RawExtension

// ---------------------------------------------------------------------------
// VirtualMachineInstance

// VirtualMachineInstance is one running (or about to run) virtual machine.
// virt-controller gives it a virt-launcher pod; virt-handler on the pod's
// node boots it and reports its state.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstances,singular=virtualmachineinstance,shortName=vmi;vmis,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=".status.interfaces[0].ipAddress"
// +kubebuilder:printcolumn:name="NodeName",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Live-Migratable",type="string",JSONPath=".status.conditions[?(@.type=='LiveMigratable')].status",priority=1
// +kubebuilder:printcolumn:name="Paused",type="string",JSONPath=".status.conditions[?(@.type=='Paused')].status",priority=1
type VirtualMachineInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the desired virtual machine.
	Spec VirtualMachineInstanceSpec `json:"spec"`
	// Status is what the controllers observed.
	Status VirtualMachineInstanceStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceList is a list of VirtualMachineInstances.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstance `json:"items"`
}

// EvictionStrategy says what happens to a VMI when its node is drained:
// None, LiveMigrate, LiveMigrateIfPossible or External.
type EvictionStrategy string

// The EvictionStrategy values.
const (
	EvictionStrategyNone                  EvictionStrategy = "None"
	EvictionStrategyLiveMigrate           EvictionStrategy = "LiveMigrate"
	EvictionStrategyLiveMigrateIfPossible EvictionStrategy = "LiveMigrateIfPossible"
	EvictionStrategyExternal              EvictionStrategy = "External"
)

// StartStrategy "Paused" starts the guest paused.
type StartStrategy string

// StartStrategyPaused starts the VMI's guest paused.
const StartStrategyPaused StartStrategy = "Paused"

// DefaultGracePeriodSeconds is the stop grace period when the VMI names none.
const DefaultGracePeriodSeconds int64 = 30

// VirtualMachineInstanceSpec describes the virtual machine to run.
type VirtualMachineInstanceSpec struct {
	// PriorityClassName is copied to the virt-launcher pod.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Domain is the virtual hardware.
	Domain DomainSpec `json:"domain"`
	// NodeSelector is copied to the virt-launcher pod.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Affinity is copied to the virt-launcher pod.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// SchedulerName is copied to the virt-launcher pod.
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
	// ServiceAccountName is the virt-launcher pod's service account.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Tolerations are copied to the virt-launcher pod.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// TopologySpreadConstraints are copied to the virt-launcher pod.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// EvictionStrategy: None, LiveMigrate, LiveMigrateIfPossible, External.
	// +optional
	EvictionStrategy *EvictionStrategy `json:"evictionStrategy,omitempty"`
	// StartStrategy "Paused" starts the guest paused.
	// +optional
	StartStrategy *StartStrategy `json:"startStrategy,omitempty"`
	// TerminationGracePeriodSeconds is how long the guest gets to shut down
	// after an ACPI power-off before it is killed. Default 30.
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// Volumes are the backing stores the disks refer to by name.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Volumes []Volume `json:"volumes,omitempty"`
	// +optional
	LivenessProbe *Unmodeled `json:"livenessProbe,omitempty"`
	// +optional
	ReadinessProbe *Unmodeled `json:"readinessProbe,omitempty"`
	// Hostname of the guest; defaults to the VMI name.
	// +optional
	Hostname string `json:"hostname,omitempty"`
	// Subdomain gives the guest the FQDN <hostname>.<subdomain>.<ns>.svc.<domain>.
	// +optional
	Subdomain string `json:"subdomain,omitempty"`
	// Networks are what the interfaces attach to, by name.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Networks []Network `json:"networks,omitempty"`
	// DNSPolicy is copied to the virt-launcher pod.
	// +optional
	DNSPolicy corev1.DNSPolicy `json:"dnsPolicy,omitempty"`
	// DNSConfig is copied to the virt-launcher pod.
	// +optional
	DNSConfig *corev1.PodDNSConfig `json:"dnsConfig,omitempty"`
	// AccessCredentials put SSH public keys from Secrets into the guest.
	// +optional
	AccessCredentials []AccessCredential `json:"accessCredentials,omitempty"`
	// Architecture of the guest (amd64 only for now).
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// +optional
	ResourceClaims []Unmodeled `json:"resourceClaims,omitempty"`
	// +optional
	UtilityVolumes []Unmodeled `json:"utilityVolumes,omitempty"`
}

// VirtualMachineInstancePhase is the coarse lifecycle state of a VMI.
type VirtualMachineInstancePhase string

const (
	// VmPhaseUnset means nobody has looked at the VMI yet.
	VmPhaseUnset VirtualMachineInstancePhase = ""
	// Pending means accepted; no launcher pod exists yet.
	Pending VirtualMachineInstancePhase = "Pending"
	// Scheduling means the launcher pod exists but has no node yet.
	Scheduling VirtualMachineInstancePhase = "Scheduling"
	// Scheduled means the launcher pod has a node; virt-handler takes over.
	Scheduled VirtualMachineInstancePhase = "Scheduled"
	// Running means the guest runs (written by virt-handler).
	Running VirtualMachineInstancePhase = "Running"
	// Succeeded means the guest shut down by itself (final).
	Succeeded VirtualMachineInstancePhase = "Succeeded"
	// Failed means the VMI cannot run or the guest crashed (final).
	Failed VirtualMachineInstancePhase = "Failed"
	// WaitingForSync marks the target of a decentralized migration.
	WaitingForSync VirtualMachineInstancePhase = "WaitingForSync"
	// Unknown means the state could not be determined.
	Unknown VirtualMachineInstancePhase = "Unknown"
)

// VirtualMachineInstanceConditionType names a VMI condition.
type VirtualMachineInstanceConditionType string

// The VirtualMachineInstanceConditionType values.
const (
	VirtualMachineInstanceProvisioning   VirtualMachineInstanceConditionType = "Provisioning"
	VirtualMachineInstanceReady          VirtualMachineInstanceConditionType = "Ready"
	VirtualMachineInstanceSynchronized   VirtualMachineInstanceConditionType = "Synchronized"
	VirtualMachineInstancePaused         VirtualMachineInstanceConditionType = "Paused"
	VirtualMachineInstanceAgentConnected VirtualMachineInstanceConditionType = "AgentConnected"
	VirtualMachineInstanceIsMigratable   VirtualMachineInstanceConditionType = "LiveMigratable"
	// VirtualMachineInstancePodScheduled mirrors the launcher pod's
	// PodScheduled condition (KubeVirt copies the pod's conditions).
	VirtualMachineInstancePodScheduled VirtualMachineInstanceConditionType = "PodScheduled"
)

// Reasons used in VMI conditions, as KubeVirt spells them.
const (
	PodTerminatingReason      = "PodTerminating"
	PodNotExistsReason        = "PodNotExists"
	PodConditionMissingReason = "PodConditionMissing"
	GuestNotRunningReason     = "GuestNotRunning"
)

// VirtualMachineInstanceCondition is one condition of a VMI.
type VirtualMachineInstanceCondition struct {
	Type   VirtualMachineInstanceConditionType `json:"type"`
	Status corev1.ConditionStatus              `json:"status"`
	// +optional
	// +nullable
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// VirtualMachineInstancePhaseTransitionTimestamp records when a phase began.
type VirtualMachineInstancePhaseTransitionTimestamp struct {
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// +nullable
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceNetworkInterface is what is known of one guest NIC.
type VirtualMachineInstanceNetworkInterface struct {
	// IP is the primary address.
	IP string `json:"ipAddress,omitempty"`
	// MAC address of the interface.
	MAC string `json:"mac,omitempty"`
	// Name of the interface in spec.domain.devices.interfaces.
	Name string `json:"name,omitempty"`
	// IPs are all addresses of the interface.
	IPs []string `json:"ipAddresses,omitempty"`
	// PodInterfaceName is the name of the pod interface it is bound to.
	PodInterfaceName string `json:"podInterfaceName,omitempty"`
	// InterfaceName is the name inside the guest.
	InterfaceName string `json:"interfaceName,omitempty"`
	// InfoSource says who reported this: domain, guest-agent, multus-status.
	InfoSource string `json:"infoSource,omitempty"`
	// QueueCount is the number of queues of the NIC.
	QueueCount int32 `json:"queueCount,omitempty"`
	// LinkState is up or down.
	LinkState string `json:"linkState,omitempty"`
}

// VirtualMachineInstanceGuestOSInfo is what the guest reports of itself.
type VirtualMachineInstanceGuestOSInfo struct {
	Name          string `json:"name,omitempty"`
	KernelRelease string `json:"kernelRelease,omitempty"`
	Version       string `json:"version,omitempty"`
	PrettyName    string `json:"prettyName,omitempty"`
	VersionID     string `json:"versionId,omitempty"`
	KernelVersion string `json:"kernelVersion,omitempty"`
	Machine       string `json:"machine,omitempty"`
	ID            string `json:"id,omitempty"`
}

// VirtualMachineInstanceMigrationMethod is LiveMigration or BlockMigration.
type VirtualMachineInstanceMigrationMethod string

// The VirtualMachineInstanceMigrationMethod values.
const (
	BlockMigration VirtualMachineInstanceMigrationMethod = "BlockMigration"
	LiveMigration  VirtualMachineInstanceMigrationMethod = "LiveMigration"
)

// VirtualMachineInstanceMigrationTransport is how migration data flows.
type VirtualMachineInstanceMigrationTransport string

// MigrationTransportUnix is the only transport: a unix socket per migration.
const MigrationTransportUnix VirtualMachineInstanceMigrationTransport = "Unix"

// CPUTopology is the vCPU layout a VMI currently has.
type CPUTopology struct {
	Cores   uint32 `json:"cores,omitempty"`
	Sockets uint32 `json:"sockets,omitempty"`
	Threads uint32 `json:"threads,omitempty"`
}

// MemoryStatus is the guest memory a VMI has.
type MemoryStatus struct {
	GuestAtBoot    *resource.Quantity `json:"guestAtBoot,omitempty"`
	GuestCurrent   *resource.Quantity `json:"guestCurrent,omitempty"`
	GuestRequested *resource.Quantity `json:"guestRequested,omitempty"`
	MemoryOverhead *resource.Quantity `json:"memoryOverhead,omitempty"`
}

// VirtualMachineInstanceStatus is what the controllers observed of a VMI.
type VirtualMachineInstanceStatus struct {
	// NodeName is the node the VMI runs on (its launcher pod's node).
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Reason is a CamelCase word for why the VMI is in this state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Conditions []VirtualMachineInstanceCondition `json:"conditions,omitempty"`
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// +optional
	PhaseTransitionTimestamps []VirtualMachineInstancePhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// +optional
	Interfaces []VirtualMachineInstanceNetworkInterface `json:"interfaces,omitempty"`
	// +optional
	GuestOSInfo VirtualMachineInstanceGuestOSInfo `json:"guestOSInfo,omitempty"`
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
	// +optional
	MigrationMethod VirtualMachineInstanceMigrationMethod `json:"migrationMethod,omitempty"`
	// +optional
	MigrationTransport VirtualMachineInstanceMigrationTransport `json:"migrationTransport,omitempty"`
	// +optional
	QOSClass *corev1.PodQOSClass `json:"qosClass,omitempty"`
	// LauncherContainerImageVersion is the image of the active launcher.
	// +optional
	LauncherContainerImageVersion string `json:"launcherContainerImageVersion,omitempty"`
	// +optional
	EvacuationNodeName string `json:"evacuationNodeName,omitempty"`
	// ActivePods maps launcher pod UID to node name; two during a migration.
	// +optional
	ActivePods map[types.UID]string `json:"activePods,omitempty"`
	// +optional
	VolumeStatus []VolumeStatus `json:"volumeStatus,omitempty"`
	// +optional
	KernelBootStatus *Unmodeled `json:"kernelBootStatus,omitempty"`
	// +optional
	FSFreezeStatus string `json:"fsFreezeStatus,omitempty"`
	// +optional
	VirtualMachineRevisionName string `json:"virtualMachineRevisionName,omitempty"`
	// RuntimeUser is the UID the launcher runs the guest as.
	// +optional
	RuntimeUser uint64 `json:"runtimeUser"`
	// VSOCKCID is the guest's vsock context ID, cluster-unique, allocated
	// by virt-controller for a VMI with autoattachVSOCK.
	// +optional
	VSOCKCID *uint32 `json:"VSOCKCID,omitempty"`
	// +optional
	SelinuxContext string `json:"selinuxContext,omitempty"`
	// Machine is the machine type the guest got.
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// +optional
	CurrentCPUTopology *CPUTopology `json:"currentCPUTopology,omitempty"`
	// +optional
	Memory *MemoryStatus `json:"memory,omitempty"`
}

// VirtualMachineInstanceMigrationState is the progress of the latest
// migration of a VMI.
type VirtualMachineInstanceMigrationState struct {
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// +optional
	TargetNodeDomainReadyTimestamp *metav1.Time `json:"targetNodeDomainReadyTimestamp,omitempty"`
	// +optional
	TargetNodeDomainDetected bool `json:"targetNodeDomainDetected,omitempty"`
	// +optional
	TargetNodeAddress string `json:"targetNodeAddress,omitempty"`
	// +optional
	TargetDirectMigrationNodePorts map[string]int `json:"targetDirectMigrationNodePorts,omitempty"`
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// +optional
	TargetPod string `json:"targetPod,omitempty"`
	// +optional
	TargetAttachmentPodUID types.UID `json:"targetAttachmentPodUID,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// +optional
	Completed bool `json:"completed,omitempty"`
	// +optional
	Failed bool `json:"failed,omitempty"`
	// +optional
	AbortRequested bool `json:"abortRequested,omitempty"`
	// +optional
	AbortStatus MigrationAbortStatus `json:"abortStatus,omitempty"`
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// +optional
	MigrationUID types.UID `json:"migrationUid,omitempty"`
	// +optional
	Mode MigrationMode `json:"mode,omitempty"`
	// +optional
	MigrationPolicyName *string `json:"migrationPolicyName,omitempty"`
	// MigrationConfiguration is the configuration the migration runs with
	// (the cluster's, narrowed by the migration), written by virt-controller
	// when it hands the migration to the handlers.
	// +optional
	MigrationConfiguration *MigrationConfiguration `json:"migrationConfiguration,omitempty"`
	// +optional
	TargetCPUSet []int `json:"targetCPUSet,omitempty"`
	// +optional
	TargetNodeTopology string `json:"targetNodeTopology,omitempty"`
	// +optional
	SourceState *Unmodeled `json:"sourceState,omitempty"`
	// +optional
	TargetState *Unmodeled `json:"targetState,omitempty"`
	// +optional
	MigrationNetworkType string `json:"migrationNetworkType,omitempty"`
	// +optional
	TargetMemoryOverhead *resource.Quantity `json:"targetMemoryOverhead,omitempty"`
}

// MigrationConfiguration is KubeVirt's migration configuration (the
// KubeVirt CR's spec.configuration.migrations, also recorded per migration
// in the VMI's status.migrationState), the part kubevmm implements.
type MigrationConfiguration struct {
	// ParallelMigrationsPerCluster bounds the migrations in flight in the
	// cluster (default 5).
	// +optional
	ParallelMigrationsPerCluster *uint32 `json:"parallelMigrationsPerCluster,omitempty"`
	// ParallelOutboundMigrationsPerNode bounds the migrations in flight out
	// of one node (default 2).
	// +optional
	ParallelOutboundMigrationsPerNode *uint32 `json:"parallelOutboundMigrationsPerNode,omitempty"`
	// BandwidthPerMigration caps each migration's stream, in bytes per
	// second (0: no cap, the default).
	// +optional
	BandwidthPerMigration *resource.Quantity `json:"bandwidthPerMigration,omitempty"`
	// CompletionTimeoutPerGiB: a migration taking longer than this many
	// seconds per GiB of guest memory is aborted (default 150).
	// +optional
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// ProgressTimeout: a migration that makes no progress for this many
	// seconds is aborted (default 150).
	// +optional
	ProgressTimeout *int64 `json:"progressTimeout,omitempty"`
	// AllowAutoConverge lets the source throttle a guest that dirties
	// memory faster than it can be sent (default false).
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// AllowPostCopy lets a migration that pre-copy cannot converge switch
	// to post-copy (default false): the target runs the guest and fetches
	// the remaining pages on demand. A failure of either side from then on
	// loses the guest, as in KubeVirt.
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
	// UnschedulablePendingTimeoutSeconds: a migration whose target pod
	// stays unschedulable this long fails (default 300).
	// +optional
	UnschedulablePendingTimeoutSeconds *int64 `json:"unschedulablePendingTimeoutSeconds,omitempty"`
	// CatchAllPendingTimeoutSeconds: a migration whose target pod is not
	// running after this long fails (default 900).
	// +optional
	CatchAllPendingTimeoutSeconds *int64 `json:"catchAllPendingTimeoutSeconds,omitempty"`
}

// MigrationAbortStatus is the state of a requested abort.
type MigrationAbortStatus string

// The MigrationAbortStatus values.
const (
	MigrationAbortSucceeded  MigrationAbortStatus = "Succeeded"
	MigrationAbortFailed     MigrationAbortStatus = "Failed"
	MigrationAbortInProgress MigrationAbortStatus = "Aborting"
)

// MigrationMode is PreCopy, PostCopy or Paused.
type MigrationMode string

// The MigrationMode values.
const (
	MigrationPreCopy  MigrationMode = "PreCopy"
	MigrationPostCopy MigrationMode = "PostCopy"
	MigrationPaused   MigrationMode = "Paused"
)

// ---------------------------------------------------------------------------
// VirtualMachine

// VirtualMachine is a virtual machine that persists across starts and stops:
// virt-controller creates and deletes its VirtualMachineInstance according to
// the run strategy.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachines,singular=virtualmachine,shortName=vm;vms,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.printableStatus",description="Human Readable Status"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the desired state of the virtual machine.
	Spec VirtualMachineSpec `json:"spec"`
	// Status is what virt-controller observed.
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

// VirtualMachineRunStrategy says when a VM should have a running VMI.
type VirtualMachineRunStrategy string

// The VirtualMachineRunStrategy values.
const (
	// RunStrategyUnknown means none is set.
	RunStrategyUnknown VirtualMachineRunStrategy = ""
	// RunStrategyAlways means a VMI always exists; one that stops is replaced.
	RunStrategyAlways VirtualMachineRunStrategy = "Always"
	// RunStrategyHalted means no VMI exists.
	RunStrategyHalted VirtualMachineRunStrategy = "Halted"
	// RunStrategyManual means the start/stop/restart subresources decide.
	RunStrategyManual VirtualMachineRunStrategy = "Manual"
	// RunStrategyRerunOnFailure means a VMI that fails is replaced, one that
	// succeeds (guest shut down) is not.
	RunStrategyRerunOnFailure VirtualMachineRunStrategy = "RerunOnFailure"
	// RunStrategyOnce means the VMI runs once and is never replaced.
	RunStrategyOnce VirtualMachineRunStrategy = "Once"
	// RunStrategyWaitAsReceiver marks the target of a decentralized migration.
	RunStrategyWaitAsReceiver VirtualMachineRunStrategy = "WaitAsReceiver"
)

// VirtualMachineSpec is the desired state of a VirtualMachine.
type VirtualMachineSpec struct {
	// Running is the older on/off switch: true is runStrategy Always, false
	// is Halted. Mutually exclusive with runStrategy.
	// +optional
	Running *bool `json:"running,omitempty"`
	// RunStrategy: Always, RerunOnFailure, Halted, Manual or Once.
	// +optional
	RunStrategy *VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// Instancetype names the instance type that sizes the VMI
	// (instancetype.kubevirt.io); the template must not set what it sets.
	// +optional
	Instancetype *InstancetypeMatcher `json:"instancetype,omitempty"`
	// Preference names the preference whose values fill what the template
	// leaves unset.
	// +optional
	Preference *PreferenceMatcher `json:"preference,omitempty"`
	// Template is the VirtualMachineInstance to create.
	Template *VirtualMachineInstanceTemplateSpec `json:"template"`
	// DataVolumeTemplates are CDI DataVolumes created with the VM.
	// +optional
	DataVolumeTemplates []DataVolumeTemplateSpec `json:"dataVolumeTemplates,omitempty"`
	// +optional
	UpdateVolumesStrategy *string `json:"updateVolumesStrategy,omitempty"`
}

// InstancetypeMatcher names a VirtualMachineInstancetype (in the VM's
// namespace) or a VirtualMachineClusterInstancetype (the default kind).
type InstancetypeMatcher struct {
	// Name of the instance type.
	// +optional
	Name string `json:"name,omitempty"`
	// Kind: VirtualMachineClusterInstancetype (default) or
	// VirtualMachineInstancetype.
	// +optional
	Kind string `json:"kind,omitempty"`
	// RevisionName is the ControllerRevision holding the copy of the
	// instance type the VM runs with; virt-controller sets it on first use,
	// and clearing it makes the next VMI take the type as it is then.
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// +optional
	InferFromVolumeFailurePolicy *string `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// PreferenceMatcher names a VirtualMachinePreference (in the VM's
// namespace) or a VirtualMachineClusterPreference (the default kind).
type PreferenceMatcher struct {
	// Name of the preference.
	// +optional
	Name string `json:"name,omitempty"`
	// Kind: VirtualMachineClusterPreference (default) or
	// VirtualMachinePreference.
	// +optional
	Kind string `json:"kind,omitempty"`
	// RevisionName: as InstancetypeMatcher's.
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// +optional
	InferFromVolumeFailurePolicy *string `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// VirtualMachineInstanceTemplateSpec is the VMI a VM creates.
type VirtualMachineInstanceTemplateSpec struct {
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec VirtualMachineInstanceSpec `json:"spec,omitempty"`
}

// DataVolumeTemplateSpec is a CDI DataVolume created with the VM. The
// DataVolume spec is CDI's; it is kept as-is for the storage component.
type DataVolumeTemplateSpec struct {
	// APIVersion and Kind are spelled out rather than embedding TypeMeta:
	// with TypeMeta and ObjectMeta controller-gen would take this for a kind
	// of its own and emit a CRD for it.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the CDI DataVolumeSpec.
	Spec Unmodeled `json:"spec"`
	// +optional
	Status *Unmodeled `json:"status,omitempty"`
}

// VirtualMachinePrintableStatus is the one-word status `kubectl get vm` shows.
type VirtualMachinePrintableStatus string

// The VirtualMachinePrintableStatus values.
const (
	VirtualMachineStatusStopped                 VirtualMachinePrintableStatus = "Stopped"
	VirtualMachineStatusProvisioning            VirtualMachinePrintableStatus = "Provisioning"
	VirtualMachineStatusStarting                VirtualMachinePrintableStatus = "Starting"
	VirtualMachineStatusRunning                 VirtualMachinePrintableStatus = "Running"
	VirtualMachineStatusPaused                  VirtualMachinePrintableStatus = "Paused"
	VirtualMachineStatusStopping                VirtualMachinePrintableStatus = "Stopping"
	VirtualMachineStatusTerminating             VirtualMachinePrintableStatus = "Terminating"
	VirtualMachineStatusCrashLoopBackOff        VirtualMachinePrintableStatus = "CrashLoopBackOff"
	VirtualMachineStatusMigrating               VirtualMachinePrintableStatus = "Migrating"
	VirtualMachineStatusUnknown                 VirtualMachinePrintableStatus = "Unknown"
	VirtualMachineStatusUnschedulable           VirtualMachinePrintableStatus = "ErrorUnschedulable"
	VirtualMachineStatusErrImagePull            VirtualMachinePrintableStatus = "ErrImagePull"
	VirtualMachineStatusImagePullBackOff        VirtualMachinePrintableStatus = "ImagePullBackOff"
	VirtualMachineStatusPvcNotFound             VirtualMachinePrintableStatus = "ErrorPvcNotFound"
	VirtualMachineStatusDataVolumeError         VirtualMachinePrintableStatus = "DataVolumeError"
	VirtualMachineStatusWaitingForVolumeBinding VirtualMachinePrintableStatus = "WaitingForVolumeBinding"
)

// VirtualMachineConditionType names a VM condition.
type VirtualMachineConditionType string

// The VirtualMachineConditionType values.
const (
	VirtualMachineFailure         VirtualMachineConditionType = "Failure"
	VirtualMachineReady           VirtualMachineConditionType = "Ready"
	VirtualMachinePaused          VirtualMachineConditionType = "Paused"
	VirtualMachineRestartRequired VirtualMachineConditionType = "RestartRequired"
)

// VirtualMachineCondition is one condition of a VM.
type VirtualMachineCondition struct {
	Type   VirtualMachineConditionType `json:"type"`
	Status corev1.ConditionStatus      `json:"status"`
	// +optional
	// +nullable
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// StateChangeRequestAction is Start or Stop.
type StateChangeRequestAction string

// The StateChangeRequestAction values.
const (
	StartRequest StateChangeRequestAction = "Start"
	StopRequest  StateChangeRequestAction = "Stop"
)

// VirtualMachineStateChangeRequest is a pending start or stop, queued by the
// start/stop/restart subresources and carried out by virt-controller.
type VirtualMachineStateChangeRequest struct {
	// Action is Start or Stop.
	Action StateChangeRequestAction `json:"action"`
	// Data carries options, e.g. "paused": "true" for a paused start.
	// +optional
	Data map[string]string `json:"data,omitempty"`
	// UID, for a Stop, is the VMI to stop; a Stop for another VMI is stale.
	// +optional
	UID *types.UID `json:"uid,omitempty"`
}

// VirtualMachineStartFailure tracks consecutive failed starts (crash loop).
type VirtualMachineStartFailure struct {
	// +optional
	ConsecutiveFailCount int `json:"consecutiveFailCount,omitempty"`
	// +optional
	LastFailedVMIUID types.UID `json:"lastFailedVMIUID,omitempty"`
	// +optional
	RetryAfterTimestamp *metav1.Time `json:"retryAfterTimestamp,omitempty"`
}

// VirtualMachineStatus is what virt-controller observed of a VM.
type VirtualMachineStatus struct {
	// +optional
	SnapshotInProgress *string `json:"snapshotInProgress,omitempty"`
	// +optional
	RestoreInProgress *string `json:"restoreInProgress,omitempty"`
	// Created: a VMI of this VM exists.
	// +optional
	Created bool `json:"created,omitempty"`
	// Ready: that VMI is running and ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// PrintableStatus is the one-word status for humans.
	// +optional
	PrintableStatus VirtualMachinePrintableStatus `json:"printableStatus,omitempty"`
	// +optional
	Conditions []VirtualMachineCondition `json:"conditions,omitempty"`
	// StateChangeRequests are pending starts/stops, oldest first.
	// +optional
	StateChangeRequests []VirtualMachineStateChangeRequest `json:"stateChangeRequests,omitempty"`
	// VolumeRequests are pending addvolume/removevolume requests, oldest
	// first.
	// +optional
	VolumeRequests []VirtualMachineVolumeRequest `json:"volumeRequests,omitempty"`
	// +optional
	VolumeSnapshotStatuses []Unmodeled `json:"volumeSnapshotStatuses,omitempty"`
	// +optional
	StartFailure *VirtualMachineStartFailure `json:"startFailure,omitempty"`
	// +optional
	MemoryDumpRequest *Unmodeled `json:"memoryDumpRequest,omitempty"`
	// ObservedGeneration is the VM generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// DesiredGeneration is the VM generation the running VMI was made from.
	// +optional
	DesiredGeneration int64 `json:"desiredGeneration,omitempty"`
	// RunStrategy is the run strategy in effect.
	// +optional
	RunStrategy VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// +optional
	InstancetypeRef *Unmodeled `json:"instancetypeRef,omitempty"`
	// +optional
	PreferenceRef *Unmodeled `json:"preferenceRef,omitempty"`
}

// ---------------------------------------------------------------------------
// VirtualMachineInstanceMigration

// VirtualMachineInstanceMigration asks to move a running VMI to another node.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstancemigrations,singular=virtualmachineinstancemigration,shortName=vmim;vmims,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="The current phase of VM instance migration"
// +kubebuilder:printcolumn:name="VMI",type="string",JSONPath=".spec.vmiName",description="The name of the VMI to perform the migration on"
type VirtualMachineInstanceMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineInstanceMigrationSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceMigrationStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceMigrationList is a list of migrations.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceMigration `json:"items"`
}

// VirtualMachineInstanceMigrationSpec names the VMI to migrate.
type VirtualMachineInstanceMigrationSpec struct {
	// VMIName is the VMI (same namespace) to migrate.
	// +optional
	VMIName string `json:"vmiName,omitempty"`
	// AddedNodeSelector narrows the target nodes for this migration only.
	// +optional
	AddedNodeSelector map[string]string `json:"addedNodeSelector,omitempty"`
	// +optional
	SendTo *Unmodeled `json:"sendTo,omitempty"`
	// +optional
	Receive *Unmodeled `json:"receive,omitempty"`
	// +optional
	Priority *string `json:"priority,omitempty"`
}

// VirtualMachineInstanceMigrationPhase is the lifecycle state of a migration.
type VirtualMachineInstanceMigrationPhase string

// The VirtualMachineInstanceMigrationPhase values.
const (
	MigrationPhaseUnset      VirtualMachineInstanceMigrationPhase = ""
	MigrationPending         VirtualMachineInstanceMigrationPhase = "Pending"
	MigrationScheduling      VirtualMachineInstanceMigrationPhase = "Scheduling"
	MigrationScheduled       VirtualMachineInstanceMigrationPhase = "Scheduled"
	MigrationPreparingTarget VirtualMachineInstanceMigrationPhase = "PreparingTarget"
	MigrationTargetReady     VirtualMachineInstanceMigrationPhase = "TargetReady"
	MigrationRunning         VirtualMachineInstanceMigrationPhase = "Running"
	MigrationSucceeded       VirtualMachineInstanceMigrationPhase = "Succeeded"
	MigrationFailed          VirtualMachineInstanceMigrationPhase = "Failed"
)

// VirtualMachineInstanceMigrationConditionType names a migration condition.
type VirtualMachineInstanceMigrationConditionType string

// The VirtualMachineInstanceMigrationConditionType values.
const (
	VirtualMachineInstanceMigrationAbortRequested          VirtualMachineInstanceMigrationConditionType = "migrationAbortRequested"
	VirtualMachineInstanceMigrationRejectedByResourceQuota VirtualMachineInstanceMigrationConditionType = "migrationRejectedByResourceQuota"
)

// VirtualMachineInstanceMigrationCondition is one condition of a migration.
type VirtualMachineInstanceMigrationCondition struct {
	Type   VirtualMachineInstanceMigrationConditionType `json:"type"`
	Status corev1.ConditionStatus                       `json:"status"`
	// +optional
	// +nullable
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	// +nullable
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// VirtualMachineInstanceMigrationPhaseTransitionTimestamp records when a
// migration phase began.
type VirtualMachineInstanceMigrationPhaseTransitionTimestamp struct {
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// +nullable
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceMigrationStatus is what the controllers observed of
// a migration.
type VirtualMachineInstanceMigrationStatus struct {
	// +optional
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// +optional
	Conditions []VirtualMachineInstanceMigrationCondition `json:"conditions,omitempty"`
	// +optional
	PhaseTransitionTimestamps []VirtualMachineInstanceMigrationPhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
	// +optional
	SynchronizationAddresses []string `json:"synchronizationAddresses,omitempty"`
}
