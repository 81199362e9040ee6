package migration

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"testing"
)

// frame turns msgs, a sequence of kind u8 | length u32 | payload (the
// length clipped to what is left), into a stream with the magic and valid
// checksums, so that mutated payloads reach the decoders instead of all
// ending at the checksum.
func frame(msgs []byte) []byte {
	s := append([]byte(nil), Magic[:]...)
	for len(msgs) > 0 {
		kind := msgs[0]
		msgs = msgs[1:]
		n := 0
		if len(msgs) >= 4 {
			n = min(int(binary.LittleEndian.Uint32(msgs)), len(msgs)-4)
			msgs = msgs[4:]
		} else {
			msgs = nil
		}
		var hdr [5]byte
		hdr[0] = kind
		binary.LittleEndian.PutUint32(hdr[1:], uint32(n))
		crc := crc32.Update(crc32.Update(0, crcTable, hdr[:]), crcTable, msgs[:n])
		s = append(append(s, hdr[:]...), msgs[:n]...)
		s = binary.LittleEndian.AppendUint32(s, crc)
		msgs = msgs[n:]
	}
	return s
}

// unframe is frame's inverse for a valid stream (the fuzz seeds).
func unframe(t testing.TB, stream []byte) []byte {
	c := newConn(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(stream), io.Discard})
	if err := c.readMagic(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		k, p, err := c.recv()
		if err != nil {
			return out
		}
		out = append(out, k)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(p)))
		out = append(out, p...)
	}
}

// FuzzReceive plays arbitrary streams to a target: raw bytes (framing,
// magic, checksums) or well-framed messages of any kind, order and
// content (headers, page runs, rounds, states, go). Whatever arrives, the
// target must end in one of two states: started after a complete
// migration, or discarded with an error.
func FuzzReceive(f *testing.F) {
	stream := recordStream(f)
	f.Add(true, stream)
	f.Add(false, unframe(f, stream))
	f.Add(true, []byte{})
	f.Add(false, []byte{msgHeader, 2, 0, 0, 0, '{', '}', msgPages, 13, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, runZero})
	f.Add(false, []byte{msgHeader, 0, 0, 0, 0, msgState, 0, 0, 0, 0, msgGo, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw bool, data []byte) {
		if !raw {
			data = frame(data)
		}
		tgt, err := feed(t, data)
		switch {
		case err == nil:
			if !tgt.started || tgt.discarded {
				t.Fatalf("migration succeeded but the target was started=%v discarded=%v", tgt.started, tgt.discarded)
			}
		case tgt.started:
			t.Fatalf("target started although the migration failed: %v", err)
		case tgt.mem != nil && !tgt.discarded:
			t.Fatalf("failed migration left the prepared target: %v", err)
		}
	})
}
