// Package v1beta1 holds the instancetype.kubevirt.io/v1beta1 API kubevmm
// serves: instance types (a VM's size: vCPUs and memory) and preferences
// (defaults for the devices and firmware a VM leaves unset), namespaced and
// cluster-wide.
//
// Field names and JSON tags are KubeVirt's. Fields kubevmm honours are
// typed; the rest are declared (Unmodeled for objects, typed for scalars)
// so the API server keeps them, and a VM that uses a type or preference
// setting one is refused naming it (see UnsupportedFields) rather than the
// setting being dropped. Only v1beta1 is served (KubeVirt also serves
// v1alpha1 and v1alpha2, long deprecated).
//
// +kubebuilder:object:generate=true
// +groupName=instancetype.kubevirt.io
package v1beta1
