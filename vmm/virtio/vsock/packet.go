package vsock

import (
	"encoding/binary"
	"fmt"
)

// HdrSize is struct virtio_vsock_hdr.
const HdrSize = 44

// EventSize is struct virtio_vsock_event: an le32 id, where 0 is
// VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, the only event defined.
const EventSize = 4

// Packet types and operations (virtio 1.2 section 5.10.6).
const (
	TypeStream = 1

	OpRequest       = 1
	OpResponse      = 2
	OpRst           = 3
	OpShutdown      = 4
	OpRW            = 5
	OpCreditUpdate  = 6
	OpCreditRequest = 7

	ShutdownRcv  = 1 // the sender will receive no more
	ShutdownSend = 2 // the sender will send no more
)

// HostCID is the host's context ID.
const HostCID = 2

// MaxPayload bounds one packet's payload (Linux sends at most 64 KiB).
const MaxPayload = 64 << 10

// Hdr is a packet header.
type Hdr struct {
	SrcCID, DstCID   uint64
	SrcPort, DstPort uint32
	Len              uint32
	Type, Op         uint16
	Flags            uint32
	BufAlloc         uint32
	FwdCnt           uint32
}

// ParseHdr decodes b (at least HdrSize bytes).
func ParseHdr(b []byte) Hdr {
	le := binary.LittleEndian
	return Hdr{
		SrcCID: le.Uint64(b[0:]), DstCID: le.Uint64(b[8:]),
		SrcPort: le.Uint32(b[16:]), DstPort: le.Uint32(b[20:]),
		Len: le.Uint32(b[24:]), Type: le.Uint16(b[28:]), Op: le.Uint16(b[30:]),
		Flags: le.Uint32(b[32:]), BufAlloc: le.Uint32(b[36:]), FwdCnt: le.Uint32(b[40:]),
	}
}

// Put encodes h into b (at least HdrSize bytes).
func (h Hdr) Put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], h.SrcCID)
	le.PutUint64(b[8:], h.DstCID)
	le.PutUint32(b[16:], h.SrcPort)
	le.PutUint32(b[20:], h.DstPort)
	le.PutUint32(b[24:], h.Len)
	le.PutUint16(b[28:], h.Type)
	le.PutUint16(b[30:], h.Op)
	le.PutUint32(b[32:], h.Flags)
	le.PutUint32(b[36:], h.BufAlloc)
	le.PutUint32(b[40:], h.FwdCnt)
}

// CheckTX validates a packet the guest sends: from its own CID, to the
// host, a stream, with a payload that fits the chain.
func CheckTX(h Hdr, guestCID uint64, payloadRoom uint64) error {
	switch {
	case h.SrcCID != guestCID:
		return fmt.Errorf("source CID %d, guest is %d", h.SrcCID, guestCID)
	case h.DstCID != HostCID:
		return fmt.Errorf("destination CID %d: only the host (2) is reachable", h.DstCID)
	case h.Type != TypeStream:
		return fmt.Errorf("socket type %d", h.Type)
	case h.Len > MaxPayload || uint64(h.Len) > payloadRoom:
		return fmt.Errorf("payload of %d bytes in a chain with room for %d", h.Len, payloadRoom)
	case h.Op < OpRequest || h.Op > OpCreditRequest:
		return fmt.Errorf("operation %d", h.Op)
	case h.Op != OpRW && h.Len != 0:
		return fmt.Errorf("operation %d with a payload", h.Op)
	}
	return nil
}
