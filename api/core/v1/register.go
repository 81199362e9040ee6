package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is KubeVirt's API group; kubevmm serves it unchanged.
const GroupName = "kubevirt.io"

// SubresourceGroupName is the aggregated API group virt-api serves the
// start/stop/restart/pause/unpause/migrate/console subresources under.
const SubresourceGroupName = "subresources.kubevirt.io"

var (
	// GroupVersion is kubevirt.io/v1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}
	// SubresourceGroupVersion is subresources.kubevirt.io/v1.
	SubresourceGroupVersion = schema.GroupVersion{Group: SubresourceGroupName, Version: "v1"}

	// VirtualMachineGroupVersionKind is kubevirt.io/v1 VirtualMachine.
	VirtualMachineGroupVersionKind = GroupVersion.WithKind("VirtualMachine")
	// VirtualMachineInstanceGroupVersionKind is kubevirt.io/v1 VirtualMachineInstance.
	VirtualMachineInstanceGroupVersionKind = GroupVersion.WithKind("VirtualMachineInstance")
	// VirtualMachineInstanceMigrationGroupVersionKind is kubevirt.io/v1 VirtualMachineInstanceMigration.
	VirtualMachineInstanceMigrationGroupVersionKind = GroupVersion.WithKind("VirtualMachineInstanceMigration")
	// KubeVirtGroupVersionKind is kubevirt.io/v1 KubeVirt.
	KubeVirtGroupVersionKind = GroupVersion.WithKind("KubeVirt")

	// SchemeBuilder registers the kinds of this package; the api package
	// depends on apimachinery only, not on controller-runtime, so that
	// clients (virtctl, tests) can import it cheaply.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kubevirt.io/v1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&VirtualMachine{}, &VirtualMachineList{},
		&VirtualMachineInstance{}, &VirtualMachineInstanceList{},
		&VirtualMachineInstanceMigration{}, &VirtualMachineInstanceMigrationList{},
		&VirtualMachineInstancePreset{}, &VirtualMachineInstancePresetList{},
		&KubeVirt{}, &KubeVirtList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
