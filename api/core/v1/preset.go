package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// VirtualMachineInstancePreset holds domain settings that virt-api's
// mutating webhook applies to the VMIs its selector matches, in its
// namespace, when they are created. Deprecated upstream since KubeVirt
// v0.57 (instance types and preferences replace it) and still served in
// v1.9, as here; creating or updating one warns so.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstancepresets,singular=virtualmachineinstancepreset,shortName=vmipreset;vmipresets,categories=all
// +kubebuilder:deprecatedversion:warning="kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be removed in v2."
type VirtualMachineInstancePreset struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the selector and the settings.
	Spec VirtualMachineInstancePresetSpec `json:"spec,omitempty"`
}

// VirtualMachineInstancePresetSpec selects VMIs by label and holds the
// domain settings they get where they set none.
type VirtualMachineInstancePresetSpec struct {
	// Selector selects the VMIs, in the preset's namespace, that get it.
	Selector metav1.LabelSelector `json:"selector"`
	// Domain holds the settings: resources.requests, cpu, firmware,
	// clock, features, devices.watchdog and ioThreadsPolicy are applied.
	// +optional
	Domain *DomainSpec `json:"domain,omitempty"`
}

// VirtualMachineInstancePresetList is a list of
// VirtualMachineInstancePresets.
//
// +kubebuilder:object:root=true
type VirtualMachineInstancePresetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstancePreset `json:"items"`
}
