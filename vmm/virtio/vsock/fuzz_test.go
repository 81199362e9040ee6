package vsock

import (
	"bytes"
	"testing"
)

// FuzzPacket: any header round-trips, and CheckTX only accepts streams
// from the guest to the host whose payload fits the chain.
func FuzzPacket(f *testing.F) {
	seed := make([]byte, HdrSize)
	Hdr{SrcCID: 3, DstCID: 2, Type: TypeStream, Op: OpRW, Len: 10}.Put(seed)
	f.Add(seed, uint64(3), uint64(10))
	f.Fuzz(func(t *testing.T, b []byte, cid, room uint64) {
		if len(b) < HdrSize {
			return
		}
		h := ParseHdr(b)
		var out [HdrSize]byte
		h.Put(out[:])
		if !bytes.Equal(out[:], b[:HdrSize]) {
			t.Fatal("header does not round-trip")
		}
		if CheckTX(h, cid, room) == nil {
			if h.SrcCID != cid || h.DstCID != HostCID || h.Type != TypeStream || uint64(h.Len) > room || h.Len > MaxPayload {
				t.Fatalf("accepted %+v (cid %d, room %d)", h, cid, room)
			}
		}
	})
}
