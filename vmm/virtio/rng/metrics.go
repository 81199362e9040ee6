package rng

import "sync/atomic"

// Metrics count the device's work.
type Metrics struct {
	Requests       atomic.Uint64
	Bytes          atomic.Uint64
	MalformedChain atomic.Uint64
	SourceErrors   atomic.Uint64
}

// Counters implements virtio.Device.
func (d *Device) Counters() map[string]uint64 {
	m := &d.Metrics
	return map[string]uint64{
		"requests": m.Requests.Load(), "bytes": m.Bytes.Load(),
		"malformed_chains": m.MalformedChain.Load(), "source_errors": m.SourceErrors.Load(),
	}
}
