// Package v1beta1 holds the cdi.kubevirt.io/v1beta1 API of the
// Containerized Data Importer: the cluster-scoped CDI CR (from which the
// CDI operator, operator/cdi, deploys cdi-controller), CDIConfig (the
// singleton `config`), StorageProfile (one per StorageClass),
// DataVolume (a PVC and how to fill it), DataSource (a PVC that
// DataVolumes clone by name, through their sourceRef) and DataImportCron
// (a registry image imported on a schedule, its DataSource kept on the
// newest import).
//
// Field names and JSON tags are upstream's
// (kubevirt/containerized-data-importer). What the API server can check
// without a webhook is checked by the CRD (CEL rules on DataVolume: one
// source, pvc xor storage, a size, the sources kubevmm does not import
// refused naming the field). A size's sign is the DataVolume
// controller's to refuse (a Failed DataVolume naming the field): CEL
// cannot parse a quantity of unbounded length within the CRD's cost
// budget. CDI's and CDIConfig's specs keep
// fields kubevmm does not declare, and the operator refuses them by name
// rather than the setting vanishing silently.
//
// The generated files (zz_generated.deepcopy.go, ../crds/*.yaml) come from
// controller-gen: `go generate ./api/cdi/...`.
//
// +kubebuilder:object:generate=true
// +groupName=cdi.kubevirt.io
package v1beta1
