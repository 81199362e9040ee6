package v1beta1

// The PVC annotations through which CDI's controllers talk (upstream's
// names): the DataVolume controller writes the source onto the PVC, the
// import (or upload) controller runs the pod and writes back how it goes.
const (
	// AnnSource is the import source: "http" or "none" (blank).
	AnnSource = GroupName + "/storage.import.source"
	// AnnEndpoint is the URL to import.
	AnnEndpoint = GroupName + "/storage.import.endpoint"
	// AnnSecret names the basic-auth Secret.
	AnnSecret = GroupName + "/storage.import.secretName"
	// AnnCertConfigMap names the ConfigMap of CA certificates.
	AnnCertConfigMap = GroupName + "/storage.import.certConfigMap"
	// AnnExtraHeaders holds the extra headers, a JSON list.
	AnnExtraHeaders = GroupName + "/storage.import.extraHeaders"
	// AnnSecretExtraHeaders holds the Secrets of extra headers, a JSON list.
	AnnSecretExtraHeaders = GroupName + "/storage.import.secretExtraHeaders"
	// AnnChecksum is the expected checksum, "algorithm:hex".
	AnnChecksum = GroupName + "/storage.import.checksum"
	// AnnRequiresScratch is "true" once the importer asked for scratch
	// space: its pod is made again with a scratch PVC.
	AnnRequiresScratch = GroupName + "/storage.import.requiresScratch"
	// AnnImportPod is the importer pod's name.
	AnnImportPod = GroupName + "/storage.import.importPodName"
	// AnnContentType is the DataVolume's content type.
	AnnContentType = GroupName + "/storage.contentType"
	// AnnPriorityClassName is the transfer pod's priority class.
	AnnPriorityClassName = GroupName + "/storage.pod.priorityclassname"
	// AnnUploadRequest marks a PVC an upload fills (value "").
	AnnUploadRequest = GroupName + "/storage.upload.target"

	// AnnPodPhase is the transfer pod's phase.
	AnnPodPhase = GroupName + "/storage.pod.phase"
	// AnnPodReady is "true" while the transfer pod is ready.
	AnnPodReady = GroupName + "/storage.pod.ready"
	// AnnPodRestarts counts the transfer pod's restarts.
	AnnPodRestarts = GroupName + "/storage.pod.restarts"
	// AnnRunningCondition and its reason and message are the Running
	// condition the transfer controller saw.
	AnnRunningCondition        = GroupName + "/storage.condition.running"
	AnnRunningConditionReason  = GroupName + "/storage.condition.running.reason"
	AnnRunningConditionMessage = GroupName + "/storage.condition.running.message"
	// AnnImportProgress is the last progress the import controller read
	// from the importer ("45.50%").
	AnnImportProgress = GroupName + "/storage.import.progress"

	// AnnCloneRequest on a clone target PVC is its source, "namespace/name".
	AnnCloneRequest = "k8s.io/CloneRequest"
	// AnnCloneSourcePod is the clone source pod, "namespace/name".
	AnnCloneSourcePod = GroupName + "/storage.sourceClonePodName"
	// AnnCloneSourcePhase is the clone source pod's phase.
	AnnCloneSourcePhase = GroupName + "/storage.clone.sourcePodPhase"
	// LabelCloneTarget marks a clone source pod and its Secret; its value
	// is the target PVC's UID.
	LabelCloneTarget = GroupName + "/cloneTarget"
	// AnnCloneToken on a DataVolume is its clone token (cdi-apiserver's,
	// storage/cdi/token): the source its creator was authorized to clone
	// and the DataVolume, valid for minutes.
	AnnCloneToken = GroupName + "/storage.clone.token"
	// AnnExtendedCloneToken on a DataVolume and its clone target PVC is
	// the clone token checked and extended by cdi-controller, bound to
	// the DataVolume's UID too; the clone controller requires it of a
	// clone from another namespace.
	AnnExtendedCloneToken = GroupName + "/storage.extended.clone.token"

	// AnnCreatedBy marks a pod a CDI controller made.
	AnnCreatedBy = GroupName + "/storage.createdByController"
	// AnnSelectedNode is the scheduler's node for a WaitForFirstConsumer
	// PVC.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
)

// The import sources on AnnSource.
const (
	SourceHTTP = "http"
	SourceNone = "none"
)

// ProgressMetric is the importer's Prometheus counter of the share of the
// image written, in percent (upstream's name).
const ProgressMetric = "kubevirt_cdi_import_progress_total"
