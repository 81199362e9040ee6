package importer

// The importer's environment and paths, set by the import controller.
const (
	EnvSource       = "IMPORTER_SOURCE"
	EnvEndpoint     = "IMPORTER_ENDPOINT"
	EnvChecksum     = "IMPORTER_CHECKSUM"
	EnvImageSize    = "IMPORTER_IMAGE_SIZE"
	EnvOverhead     = "IMPORTER_FILESYSTEM_OVERHEAD"
	EnvOwnerUID     = "OWNER_UID"
	EnvExtraHeaders = "IMPORTER_EXTRA_HEADERS"
	EnvAccessKey    = "IMPORTER_ACCESS_KEY_ID"
	EnvSecretKey    = "IMPORTER_SECRET_KEY"
	// EnvRegistryPullMethod and EnvRegistryArchitecture are a registry
	// import's pull method (pod or node) and platform.
	EnvRegistryPullMethod   = "IMPORTER_REGISTRY_IMPORT_METHOD"
	EnvRegistryArchitecture = "IMPORTER_REGISTRY_ARCHITECTURE"

	// DataDir holds disk.img on a Filesystem PVC.
	DataDir = "/data"
	// BlockPath is a Block PVC's device.
	BlockPath = "/dev/cdi-block-volume"
	// ScratchDir is the scratch PVC's mount.
	ScratchDir = "/scratch"
	// CertDir holds the certConfigMap's CA certificates.
	CertDir = "/certs"
	// RegistryDiskDir is where a containerDisk image keeps its disk: a
	// node-pulled registry import runs in that image.
	RegistryDiskDir = "/disk"
	// InstallDir is the emptyDir through which a node-pulled registry
	// import gets this binary into the containerDisk image's container.
	InstallDir = "/kubevmm-bin"
	// SecretHeadersDir holds one directory per secretExtraHeaders Secret,
	// each of whose files is a header.
	SecretHeadersDir = "/extraheaders"
)
