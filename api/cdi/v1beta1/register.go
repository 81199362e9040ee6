package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is CDI's API group.
const GroupName = "cdi.kubevirt.io"

// The CRDs' names.
const (
	CDICRDName            = "cdis." + GroupName
	CDIConfigCRDName      = "cdiconfigs." + GroupName
	StorageProfileCRDName = "storageprofiles." + GroupName
	DataVolumeCRDName     = "datavolumes." + GroupName
	DataSourceCRDName     = "datasources." + GroupName
)

var (
	// GroupVersion is cdi.kubevirt.io/v1beta1.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the cdi.kubevirt.io/v1beta1 kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&CDI{}, &CDIList{},
		&CDIConfig{}, &CDIConfigList{},
		&StorageProfile{}, &StorageProfileList{},
		&DataVolume{}, &DataVolumeList{},
		&DataImportCron{}, &DataImportCronList{},
		&DataSource{}, &DataSourceList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
