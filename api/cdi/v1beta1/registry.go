package v1beta1

// DataVolumeSourceRegistry is a containerDisk-style image in a registry:
// the disk (raw or qcow2) is the one file under /disk/ in the image.
//
// +kubebuilder:validation:XValidation:rule="!has(self.imageStream)",fieldPath=".imageStream",message="spec.source.registry.imageStream (OpenShift image streams) is not supported by kubevmm"
// +kubebuilder:validation:XValidation:rule="has(self.url)",message="spec.source.registry.url is required"
// +kubebuilder:validation:XValidation:rule="!has(self.pullMethod) || self.pullMethod != 'node' || (!has(self.secretRef) && !has(self.certConfigMap))",message="spec.source.registry: pullMethod node pulls with the node's credentials and trust: secretRef and certConfigMap apply to pullMethod pod only"
type DataVolumeSourceRegistry struct {
	// URL is docker://host[:port]/repository[:tag|@sha256:digest].
	// +optional
	// +kubebuilder:validation:Pattern=`^docker://`
	URL *string `json:"url,omitempty"`
	// ImageStream is OpenShift's; refused.
	// +optional
	ImageStream *string `json:"imageStream,omitempty"`
	// PullMethod is pod (the importer pulls the image, the default) or
	// node (the kubelet pulls it as the importer pod's image).
	// +optional
	PullMethod *RegistryPullMethod `json:"pullMethod,omitempty"`
	// SecretRef names a Secret with accessKeyId and secretKey, the
	// registry's credentials.
	// +optional
	SecretRef *string `json:"secretRef,omitempty"`
	// CertConfigMap names a ConfigMap whose values are PEM CA
	// certificates the registry's certificate is checked against.
	// +optional
	CertConfigMap *string `json:"certConfigMap,omitempty"`
	// Platform picks the image of a multi-platform index.
	// +optional
	Platform *PlatformOptions `json:"platform,omitempty"`
}

// RegistryPullMethod is how a registry image is pulled.
// +kubebuilder:validation:Enum=pod;node
type RegistryPullMethod string

// The pull methods.
const (
	RegistryPullPod  RegistryPullMethod = "pod"
	RegistryPullNode RegistryPullMethod = "node"
)

// PlatformOptions pick a platform's image.
type PlatformOptions struct {
	// Architecture, e.g. amd64 (the default).
	// +optional
	Architecture string `json:"architecture,omitempty"`
}

// Registry import annotations on the PVC (upstream's names) and the
// source's value of AnnSource.
const (
	SourceRegistry = "registry"
	// AnnRegistryImportMethod is the pull method, "pod" or "node".
	AnnRegistryImportMethod = GroupName + "/storage.import.registryImportMethod"
	// AnnRegistryArchitecture is the platform's architecture.
	AnnRegistryArchitecture = GroupName + "/storage.import.registryArchitecture"
)
