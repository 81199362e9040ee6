package net

import (
	"encoding/binary"
	"fmt"
)

// HdrSize is struct virtio_net_hdr_v1 (VERSION_1 always has num_buffers).
const HdrSize = 12

// Header flags and GSO types (virtio 1.2 section 5.1.6).
const (
	HdrFNeedsCsum = 1
	HdrFDataValid = 2
	HdrFRSCInfo   = 4

	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3
	GSOTCPv6 = 4
	GSOUDPL4 = 5
	GSOECN   = 0x80
)

// MaxFrame is the largest frame (without header) either side may send:
// a 64 KiB TSO super-frame plus its Ethernet and VLAN headers.
const MaxFrame = 65536 + 14 + 4

// Hdr is a parsed virtio-net header.
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
	NumBuffers uint16
}

// ParseHdr decodes b (at least HdrSize bytes).
func ParseHdr(b []byte) Hdr {
	le := binary.LittleEndian
	return Hdr{
		Flags: b[0], GSOType: b[1],
		HdrLen: le.Uint16(b[2:]), GSOSize: le.Uint16(b[4:]),
		CsumStart: le.Uint16(b[6:]), CsumOffset: le.Uint16(b[8:]),
		NumBuffers: le.Uint16(b[10:]),
	}
}

// Put encodes h into b (at least HdrSize bytes).
func (h Hdr) Put(b []byte) {
	le := binary.LittleEndian
	b[0], b[1] = h.Flags, h.GSOType
	le.PutUint16(b[2:], h.HdrLen)
	le.PutUint16(b[4:], h.GSOSize)
	le.PutUint16(b[6:], h.CsumStart)
	le.PutUint16(b[8:], h.CsumOffset)
	le.PutUint16(b[10:], h.NumBuffers)
}

// CheckTX validates the header of a frame the guest sends against the
// negotiated features: a guest may only ask for the offloads it was
// offered and accepted, with offsets inside the frame. The returned
// header is what the tap gets (num_buffers cleared).
func CheckTX(h Hdr, features uint64, frameLen int) (Hdr, error) {
	if frameLen < 14 || frameLen > MaxFrame {
		return h, fmt.Errorf("frame of %d bytes", frameLen)
	}
	if h.Flags&^HdrFNeedsCsum != 0 {
		return h, fmt.Errorf("tx header flags %#x", h.Flags)
	}
	if h.Flags&HdrFNeedsCsum != 0 {
		if features&FCsum == 0 {
			return h, fmt.Errorf("partial checksum without VIRTIO_NET_F_CSUM")
		}
		if int(h.CsumStart)+int(h.CsumOffset)+2 > frameLen {
			return h, fmt.Errorf("checksum at %d+%d outside a %d-byte frame", h.CsumStart, h.CsumOffset, frameLen)
		}
	}
	switch h.GSOType {
	case GSONone:
	case GSOTCPv4, GSOTCPv6:
		need := uint64(FHostTSO4)
		if h.GSOType == GSOTCPv6 {
			need = FHostTSO6
		}
		switch {
		case features&need == 0:
			return h, fmt.Errorf("GSO type %d not negotiated", h.GSOType)
		case h.Flags&HdrFNeedsCsum == 0:
			return h, fmt.Errorf("GSO frame without a partial checksum")
		case h.GSOSize == 0:
			return h, fmt.Errorf("GSO frame with gso_size 0")
		}
	default:
		return h, fmt.Errorf("GSO type %#x not supported", h.GSOType)
	}
	h.NumBuffers = 0
	return h, nil
}
