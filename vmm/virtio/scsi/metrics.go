package scsi

import "sync/atomic"

// Metrics count the controller's work, its hot-plugs and the guest's
// mistakes.
type Metrics struct {
	Reads, Writes, Flushes atomic.Uint64
	ReadBytes, WriteBytes  atomic.Uint64
	IOErrors               atomic.Uint64 // host I/O failed (MEDIUM ERROR)
	InvalidRequests        atomic.Uint64 // out of range, bad length or field
	ReadOnlyWrites         atomic.Uint64
	Unsupported            atomic.Uint64 // opcodes and control requests not served
	BadTarget              atomic.Uint64 // requests for an empty target
	TaskManagement         atomic.Uint64
	MalformedChains        atomic.Uint64
	Attached, Detached     atomic.Uint64
	Events, EventsMissed   atomic.Uint64
}

// Snapshot returns the counters by name.
func (m *Metrics) Snapshot() map[string]uint64 {
	return map[string]uint64{
		"reads": m.Reads.Load(), "writes": m.Writes.Load(), "flushes": m.Flushes.Load(),
		"read_bytes": m.ReadBytes.Load(), "write_bytes": m.WriteBytes.Load(),
		"io_errors": m.IOErrors.Load(), "invalid_requests": m.InvalidRequests.Load(),
		"read_only_writes": m.ReadOnlyWrites.Load(), "unsupported": m.Unsupported.Load(),
		"bad_target": m.BadTarget.Load(), "task_management": m.TaskManagement.Load(),
		"malformed_chains": m.MalformedChains.Load(),
		"attached":         m.Attached.Load(), "detached": m.Detached.Load(),
		"events": m.Events.Load(), "events_missed": m.EventsMissed.Load(),
	}
}

// Counters implements virtio.Device.
func (d *Device) Counters() map[string]uint64 { return d.Metrics.Snapshot() }
