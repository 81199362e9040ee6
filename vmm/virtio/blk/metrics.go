package blk

import "sync/atomic"

// Metrics count the device's work and the guest's mistakes.
type Metrics struct {
	Reads, Writes, Flushes, Discards atomic.Uint64
	ReadBytes, WriteBytes            atomic.Uint64
	IOErrors                         atomic.Uint64 // host I/O failed
	InvalidRequests                  atomic.Uint64 // out of range, bad length
	ReadOnlyWrites                   atomic.Uint64
	Unsupported                      atomic.Uint64
	MalformedChains                  atomic.Uint64
}

// Snapshot returns the counters by name.
func (m *Metrics) Snapshot() map[string]uint64 {
	return map[string]uint64{
		"reads": m.Reads.Load(), "writes": m.Writes.Load(), "flushes": m.Flushes.Load(),
		"discards": m.Discards.Load(), "read_bytes": m.ReadBytes.Load(), "write_bytes": m.WriteBytes.Load(),
		"io_errors": m.IOErrors.Load(), "invalid_requests": m.InvalidRequests.Load(),
		"read_only_writes": m.ReadOnlyWrites.Load(), "unsupported": m.Unsupported.Load(),
		"malformed_chains": m.MalformedChains.Load(),
	}
}

// Counters implements virtio.Device.
func (d *Device) Counters() map[string]uint64 { return d.Metrics.Snapshot() }
