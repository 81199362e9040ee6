package vsock

import "sync/atomic"

// Metrics count the device's traffic and the guest's mistakes.
type Metrics struct {
	Connections, ConnectFailures, BadConnects atomic.Uint64
	RxPackets, TxPackets                      atomic.Uint64
	RxBytes, TxBytes                          atomic.Uint64
	BadPackets, MalformedChains               atomic.Uint64
	CreditViolations, TransportResets         atomic.Uint64
	RefusedConnections                        atomic.Uint64 // past MaxConnections
}

// Snapshot returns the counters by name.
func (m *Metrics) Snapshot() map[string]uint64 {
	return map[string]uint64{
		"connections": m.Connections.Load(), "connect_failures": m.ConnectFailures.Load(),
		"bad_connects": m.BadConnects.Load(), "rx_packets": m.RxPackets.Load(), "tx_packets": m.TxPackets.Load(),
		"rx_bytes": m.RxBytes.Load(), "tx_bytes": m.TxBytes.Load(), "bad_packets": m.BadPackets.Load(),
		"malformed_chains": m.MalformedChains.Load(), "credit_violations": m.CreditViolations.Load(),
		"transport_resets": m.TransportResets.Load(), "refused_connections": m.RefusedConnections.Load(),
	}
}

// Counters implements virtio.Device.
func (d *Device) Counters() map[string]uint64 { return d.Metrics.Snapshot() }
