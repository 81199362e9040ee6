package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The replies of the VMI subresources that read the guest agent, as
// KubeVirt's virt-api serves them (guestosinfo, userlist,
// filesystemlist), and the body of freeze.

// VirtualMachineInstanceGuestAgentInfo is what the guest agent reports:
// the guestosinfo subresource.
type VirtualMachineInstanceGuestAgentInfo struct {
	metav1.TypeMeta `json:",inline"`
	// GAVersion is the guest agent's version.
	GAVersion string `json:"guestAgentVersion,omitempty"`
	// SupportedCommands are the agent's commands.
	SupportedCommands []GuestAgentCommandInfo           `json:"supportedCommands,omitempty"`
	Hostname          string                            `json:"hostname,omitempty"`
	OS                VirtualMachineInstanceGuestOSInfo `json:"os,omitempty"`
	// Timezone is "ZONE, OFFSET" (seconds east of UTC).
	Timezone       string                               `json:"timezone,omitempty"`
	UserList       []VirtualMachineInstanceGuestOSUser  `json:"userList,omitempty"`
	FSInfo         VirtualMachineInstanceFileSystemInfo `json:"fsInfo,omitempty"`
	FSFreezeStatus string                               `json:"fsFreezeStatus,omitempty"`
}

// GuestAgentCommandInfo is one command of the guest agent.
type GuestAgentCommandInfo struct {
	Name    string `json:"name"`
	Enabled bool   `json:"enabled,omitempty"`
}

// VirtualMachineInstanceGuestOSUserList is the userlist subresource.
type VirtualMachineInstanceGuestOSUserList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceGuestOSUser `json:"items"`
}

// VirtualMachineInstanceGuestOSUser is a user logged in to the guest;
// LoginTime is in seconds since the epoch.
type VirtualMachineInstanceGuestOSUser struct {
	UserName  string  `json:"userName"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"loginTime,omitempty"`
}

// VirtualMachineInstanceFileSystemInfo lists the guest's filesystems.
type VirtualMachineInstanceFileSystemInfo struct {
	Filesystems []VirtualMachineInstanceFileSystem `json:"disks"`
}

// VirtualMachineInstanceFileSystemList is the filesystemlist subresource.
type VirtualMachineInstanceFileSystemList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceFileSystem `json:"items"`
}

// VirtualMachineInstanceFileSystem is one mounted filesystem of the guest.
type VirtualMachineInstanceFileSystem struct {
	DiskName       string                                 `json:"diskName"`
	MountPoint     string                                 `json:"mountPoint"`
	FileSystemType string                                 `json:"fileSystemType"`
	UsedBytes      int                                    `json:"usedBytes"`
	TotalBytes     int                                    `json:"totalBytes"`
	Disk           []VirtualMachineInstanceFileSystemDisk `json:"disk,omitempty"`
}

// VirtualMachineInstanceFileSystemDisk is a disk a filesystem lies on.
type VirtualMachineInstanceFileSystemDisk struct {
	Serial  string `json:"serial,omitempty"`
	BusType string `json:"busType"`
}

// FreezeUnfreezeTimeout is the body of the freeze subresource: the
// filesystems are thawed after UnfreezeTimeout unless unfreeze comes
// first.
type FreezeUnfreezeTimeout struct {
	UnfreezeTimeout *metav1.Duration `json:"unfreezeTimeout"`
}
