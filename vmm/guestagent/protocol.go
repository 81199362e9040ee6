// Package guestagent is the QEMU guest agent protocol (qemu-ga's JSON
// commands, qga/qapi-schema.json) in the subset KubeVirt uses: the types
// of the commands' replies and a client for one connection to an agent.
// The test guest's agent (test/guestagent) serves it over vsock; any
// qemu-ga started with --method=vsock-listen --path=-1:Port does too.
//
// Each request is one JSON object, {"execute": NAME, "arguments": {...}};
// each reply is {"return": ...} or {"error": {"class": C, "desc": D}},
// one per line. guest-shutdown has no reply on success.
package guestagent

import (
	"encoding/json"
	"fmt"
)

// Port is the vsock port the guest agent listens on. qemu-ga over vsock
// has no assigned port (its vsock-listen takes any CID:port), so kubevmm
// picks one and documents it.
const Port = 1234

// Command names.
const (
	CmdSync          = "guest-sync"
	CmdSyncDelimited = "guest-sync-delimited"
	CmdPing          = "guest-ping"
	CmdInfo          = "guest-info"
	CmdOSInfo        = "guest-get-osinfo"
	CmdHostName      = "guest-get-host-name"
	CmdTimezone      = "guest-get-timezone"
	CmdInterfaces    = "guest-network-get-interfaces"
	CmdUsers         = "guest-get-users"
	CmdFSInfo        = "guest-get-fsinfo"
	CmdFreeze        = "guest-fsfreeze-freeze"
	CmdThaw          = "guest-fsfreeze-thaw"
	CmdFreezeStatus  = "guest-fsfreeze-status"
	CmdShutdown      = "guest-shutdown"
)

// Error classes qemu-ga answers with.
const (
	ClassGenericError    = "GenericError"
	ClassCommandNotFound = "CommandNotFound"
)

// Delimiter is the byte guest-sync-delimited puts before its reply (and a
// client before its request): it resets the other side's JSON parser.
const Delimiter = 0xff

// Request is one command.
type Request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Response is a command's reply: Return or Error.
type Response struct {
	Return json.RawMessage `json:"return,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Error is qemu-ga's error object.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return fmt.Sprintf("guest agent: %s: %s", e.Class, e.Desc) }

// SyncArgs are guest-sync's and guest-sync-delimited's.
type SyncArgs struct {
	ID int64 `json:"id"`
}

// ShutdownArgs are guest-shutdown's; Mode is powerdown (default), halt
// or reboot.
type ShutdownArgs struct {
	Mode string `json:"mode,omitempty"`
}

// AgentInfo is guest-info's reply.
type AgentInfo struct {
	Version           string        `json:"version"`
	SupportedCommands []CommandInfo `json:"supported_commands"`
}

// CommandInfo is one entry of AgentInfo.SupportedCommands.
type CommandInfo struct {
	Name            string `json:"name"`
	Enabled         bool   `json:"enabled"`
	SuccessResponse bool   `json:"success-response"`
}

// OSInfo is guest-get-osinfo's reply (os-release and uname).
type OSInfo struct {
	KernelRelease string `json:"kernel-release,omitempty"`
	KernelVersion string `json:"kernel-version,omitempty"`
	Machine       string `json:"machine,omitempty"`
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
	PrettyName    string `json:"pretty-name,omitempty"`
	Version       string `json:"version,omitempty"`
	VersionID     string `json:"version-id,omitempty"`
	Variant       string `json:"variant,omitempty"`
	VariantID     string `json:"variant-id,omitempty"`
}

// HostName is guest-get-host-name's reply.
type HostName struct {
	HostName string `json:"host-name"`
}

// Timezone is guest-get-timezone's reply: the zone's name, if known, and
// its offset from UTC in seconds.
type Timezone struct {
	Zone   string `json:"zone,omitempty"`
	Offset int    `json:"offset"`
}

// Interface is one entry of guest-network-get-interfaces' reply.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address,omitempty"`
	IPAddresses     []IPAddress `json:"ip-addresses,omitempty"`
}

// IPAddress is one address of an Interface; Type is ipv4 or ipv6.
type IPAddress struct {
	Type    string `json:"ip-address-type"`
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// User is one entry of guest-get-users' reply; LoginTime is in seconds
// since the epoch.
type User struct {
	User      string  `json:"user"`
	Domain    string  `json:"domain,omitempty"`
	LoginTime float64 `json:"login-time"`
}

// Filesystem is one entry of guest-get-fsinfo's reply.
type Filesystem struct {
	Name       string        `json:"name"`
	Mountpoint string        `json:"mountpoint"`
	Type       string        `json:"type"`
	UsedBytes  *uint64       `json:"used-bytes,omitempty"`
	TotalBytes *uint64       `json:"total-bytes,omitempty"`
	Disk       []DiskAddress `json:"disk"`
}

// DiskAddress is where a Filesystem lies (qemu-ga's GuestDiskAddress).
type DiskAddress struct {
	PCIController PCIAddress `json:"pci-controller"`
	BusType       string     `json:"bus-type"`
	Bus           int        `json:"bus"`
	Target        int        `json:"target"`
	Unit          int        `json:"unit"`
	Serial        string     `json:"serial,omitempty"`
	Dev           string     `json:"dev,omitempty"`
}

// PCIAddress is a disk controller's address; -1 where there is none (a
// virtio-mmio disk).
type PCIAddress struct {
	Domain   int `json:"domain"`
	Bus      int `json:"bus"`
	Slot     int `json:"slot"`
	Function int `json:"function"`
}

// Freeze states (guest-fsfreeze-status).
const (
	FreezeThawed = "thawed"
	FreezeFrozen = "frozen"
)
