// Package api is the control API of a running VMM: HTTP/1.1 with JSON
// bodies on a unix socket, as Firecracker's. The `vmm` CLI, virt-launcher
// and virt-handler all speak it.
//
//	GET    /v1/vm             state, config summary, exit reason once ended
//	PUT    /v1/vm/pause       stop vCPUs and device I/O
//	PUT    /v1/vm/resume
//	PUT    /v1/vm/stop        end the VM now (the VMM process exits)
//	PUT    /v1/vm/powerbutton press the guest's ACPI power button (it may shut down)
//	PUT    /v1/vm/reset       hard reset: the guest boots again, in the same VM
//	PUT    /v1/vm/softreboot  press the power button; the guest's poweroff then boots it again
//	PUT    /v1/vm/shutdown    ask the guest to shut down: its agent's guest-shutdown when one is connected, else the power button
//	PUT    /v1/vm/freeze      {"unfreeze_timeout_s": N}: freeze the guest's filesystems through its agent
//	PUT    /v1/vm/unfreeze    thaw them
//	PUT    /v1/vm/snapshot    {"dir": D, "resume": bool}: pause, write D, resume unless told not to
//	PUT    /v1/vm/migrate     {"to": "tcp:HOST:PORT"|"unix:PATH", "tls": {...}, ...}: start a live migration
//	GET    /v1/vm/migration   progress and statistics of the current/last migration
//	DELETE /v1/vm/migration   cancel it (the VM keeps running here)
//	GET    /v1/metrics        VMM counters
//	GET|PUT /v1/vm/volumes, DELETE /v1/vm/volumes/{name}: hot-plugged volumes (volumes.go)
//
// Errors come back as {"error": "..."} with a 4xx status for bad requests
// and conflicts (e.g. pausing a stopped VM) and 5xx for failures.
package api

import (
	"errors"
	"time"

	"github.com/kubevmm/kubevmm/vmm/guestagent"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// State of a VM as the API reports it.
type State string

// VM states.
const (
	StateRunning   State = "Running"
	StatePaused    State = "Paused"
	StateMigrating State = "Migrating"
	StateMigrated  State = "Migrated" // the guest now runs elsewhere
	StateStopped   State = "Stopped"  // the guest ended (see Info.Exit)
	StateIncoming  State = "Incoming" // waiting for a migration stream
)

// Info describes the VM.
type Info struct {
	State     State  `json:"state"`
	CPUs      int    `json:"cpus"`
	MemoryMiB uint64 `json:"memory_mib"`
	Backend   string `json:"backend"` // "kubevmm" or "qemu"
	// BackendReason says why that backend runs the VM (virt-launcher's
	// choice; empty from a plain vmm).
	BackendReason string    `json:"backend_reason,omitempty"`
	Started       time.Time `json:"started,omitempty"`
	Exit          string    `json:"exit,omitempty"`  // how the guest ended
	Error         string    `json:"error,omitempty"` // why, if it failed
	// GuestAgent is what the guest's agent last reported, where the VM's
	// owner polls one (virt-launcher); nil where nobody does.
	GuestAgent *GuestAgent `json:"guest_agent,omitempty"`
}

// GuestAgent is the guest agent's last answers (see package guestagent).
// Connected says the agent answered the last poll; the rest is empty
// while it is not.
type GuestAgent struct {
	Connected         bool                     `json:"connected"`
	Version           string                   `json:"version,omitempty"`
	SupportedCommands []guestagent.CommandInfo `json:"supported_commands,omitempty"`
	Hostname          string                   `json:"hostname,omitempty"`
	// Timezone is "ZONE, OFFSET" (seconds east of UTC), as KubeVirt shows it.
	Timezone       string                  `json:"timezone,omitempty"`
	OS             guestagent.OSInfo       `json:"os"`
	Interfaces     []guestagent.Interface  `json:"interfaces,omitempty"`
	Users          []guestagent.User       `json:"users,omitempty"`
	Filesystems    []guestagent.Filesystem `json:"filesystems,omitempty"`
	FSFreezeStatus string                  `json:"fs_freeze_status,omitempty"`
}

// FreezeRequest freezes the guest's filesystems; they are thawed after
// UnfreezeTimeout seconds (0: only by unfreeze), as KubeVirt's
// unfreezeTimeout bounds a snapshot's freeze.
type FreezeRequest struct {
	UnfreezeTimeout int64 `json:"unfreeze_timeout_s,omitempty"`
}

// ShutdownResult says how the guest was asked to shut down (or to
// reboot).
type ShutdownResult struct {
	// Via is "guest-agent" or "acpi" (the power button).
	Via string `json:"via"`
}

// Shutdown methods (ShutdownResult.Via).
const (
	ShutdownViaAgent = "guest-agent"
	ShutdownViaACPI  = "acpi"
)

// SnapshotRequest asks for a snapshot into Dir.
type SnapshotRequest struct {
	Dir string `json:"dir"`
	// Resume the VM after the snapshot is written (default true). With
	// false the VM stays paused, e.g. to be stopped next.
	Resume *bool `json:"resume,omitempty"`
}

// SnapshotResult says what was written.
type SnapshotResult struct {
	Dir         string  `json:"dir"`
	MemoryBytes int64   `json:"memory_bytes"` // allocated on disk (zero pages are holes)
	PausedMs    float64 `json:"paused_ms"`
}

// MigrateRequest starts a live migration.
type MigrateRequest struct {
	To              string `json:"to"`                           // tcp:HOST:PORT or unix:PATH
	BandwidthMBps   int64  `json:"bandwidth_mbps,omitempty"`     // cap in MiB/s (0: none)
	DowntimeMs      int64  `json:"downtime_ms,omitempty"`        // default 300
	AutoConverge    bool   `json:"auto_converge,omitempty"`      //
	ProgressTimeout int64  `json:"progress_timeout_s,omitempty"` // default 150
	Timeout         int64  `json:"timeout_s,omitempty"`          // completion timeout (0: none)
	MaxRounds       int    `json:"max_rounds,omitempty"`         // pre-copy rounds before stop-and-copy is forced (default 30)
	// TLS authenticates the stream to a tcp: target with mutual TLS 1.3;
	// the VMM reads the files. Without it a tcp: stream is plaintext and
	// unauthenticated.
	TLS *migration.TLSFiles `json:"tls,omitempty"`
	// PostCopy switches to post-copy when pre-copy does not converge: the
	// target runs the guest at once and fetches the remaining pages on
	// demand (KubeVirt's allowPostCopy). From then on a failure of either
	// side loses the guest.
	PostCopy bool `json:"post_copy,omitempty"`
}

// MigrationStatus is the state of the current or last migration.
type MigrationStatus struct {
	Active bool            `json:"active"`
	Stats  migration.Stats `json:"stats"`
}

// Errors a VM implementation returns to get the right HTTP status.
var (
	// ErrConflict: the request doesn't fit the VM's state (409).
	ErrConflict = errors.New("not possible in the VM's current state")
	// ErrBadRequest: the request itself is wrong (400).
	ErrBadRequest = errors.New("bad request")
)

// VM is what the server controls.
type VM interface {
	Info() Info
	Pause() error
	Resume() error
	Stop() error
	// PowerButton presses the guest's ACPI power button and returns: a
	// guest that handles it powers off, and the VM ends, in its own time.
	PowerButton() error
	// Reset restarts the guest at once, as a reset button: it boots
	// again in the same VM (same process, devices and disks).
	Reset() error
	// SoftReboot asks the guest to reboot: the power button is pressed,
	// and when the guest powers off it boots again instead of ending.
	SoftReboot() error
	Snapshot(SnapshotRequest) (SnapshotResult, error)
	Migrate(MigrateRequest) error
	Migration() MigrationStatus
	CancelMigration() error
	Metrics() map[string]any
}

// GuestAgentVM is a VM whose owner talks to its guest agent
// (virt-launcher). A VM without it has shutdown answered by the power
// button and freeze refused.
type GuestAgentVM interface {
	// Shutdown asks the guest to shut down, through its agent when one
	// is connected, else by the ACPI power button, and returns.
	Shutdown() (ShutdownResult, error)
	// Reboot asks the guest to reboot, through its agent when one is
	// connected and the guest's reboot boots it again in this VM, else
	// as SoftReboot does (the power button), and returns.
	Reboot() (ShutdownResult, error)
	// Freeze freezes the guest's filesystems through its agent (ErrConflict
	// when none is connected).
	Freeze(FreezeRequest) error
	Unfreeze() error
}
