package rng

import "sync/atomic"

// Metrics count the device's work.
type Metrics struct {
	Requests       atomic.Uint64
	Bytes          atomic.Uint64
	MalformedChain atomic.Uint64
	SourceErrors   atomic.Uint64
}
