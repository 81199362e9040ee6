package net

import "sync/atomic"

// Metrics count traffic and drops.
type Metrics struct {
	RxFrames, RxBytes atomic.Uint64
	TxFrames, TxBytes atomic.Uint64
	RxDropped         atomic.Uint64 // frames too big for the buffers given, tap errors
	RxNoBuffers       atomic.Uint64 // times rx stalled waiting for guest buffers
	TxDropped         atomic.Uint64 // tap refused the frame
	TxMalformed       atomic.Uint64 // bad header or length from the guest
	MalformedChains   atomic.Uint64
	TapReadErrors     atomic.Uint64
	CtrlErrors        atomic.Uint64 // control commands refused
	QueuePairs        atomic.Uint64 // queue pairs the driver uses (a gauge)
}

// Snapshot returns the counters by name.
func (m *Metrics) Snapshot() map[string]uint64 {
	return map[string]uint64{
		"rx_frames": m.RxFrames.Load(), "rx_bytes": m.RxBytes.Load(),
		"tx_frames": m.TxFrames.Load(), "tx_bytes": m.TxBytes.Load(),
		"rx_dropped": m.RxDropped.Load(), "rx_no_buffers": m.RxNoBuffers.Load(),
		"tx_dropped": m.TxDropped.Load(), "tx_malformed": m.TxMalformed.Load(),
		"malformed_chains": m.MalformedChains.Load(), "tap_read_errors": m.TapReadErrors.Load(),
		"ctrl_errors": m.CtrlErrors.Load(), "queue_pairs": m.QueuePairs.Load(),
	}
}

// Counters implements virtio.Device.
func (d *Device) Counters() map[string]uint64 { return d.Metrics.Snapshot() }
