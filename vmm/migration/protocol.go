// Package migration moves a running VM's memory and state to another VMM
// process over a stream (TCP or a unix socket): iterative pre-copy of guest
// RAM driven by dirty-page tracking, then a short stop-and-copy of what is
// left plus the device and vCPU state, then a handshake that makes sure
// exactly one side runs the guest.
//
// Wire format (all integers little-endian). The stream opens with the
// 8-byte magic "KVMMIG\x00\x01". Then messages, each
//
//	kind u8 | length u32 | payload [length]byte | crc32c(kind,length,payload) u32
//
// Kinds: header (JSON: the config to build the target VM and its RAM
// layout), pages (page runs, below), round (JSON Stats of a finished
// pre-copy round, informational), state (JSON: complete VM state after the
// source paused), ready (target → source: state loaded, not running),
// go (source → target: the source has committed and will not resume),
// error (UTF-8 text, either direction).
//
// A pages payload is a sequence of runs:
//
//	gpa u64 | count u32 | type u8 (0 = zero pages, 1 = data) | data [count*4096]byte if type 1
//
// The target checks every run against its RAM; anything malformed ends the
// migration with an error and the target discards what it received.
package migration

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Magic opens every migration stream.
var Magic = [8]byte{'K', 'V', 'M', 'M', 'I', 'G', 0, 1}

// Message kinds.
const (
	msgHeader byte = 1
	msgPages  byte = 2
	msgRound  byte = 3
	msgState  byte = 4
	msgReady  byte = 5
	msgGo     byte = 6
	msgError  byte = 7
)

var kindNames = map[byte]string{
	msgHeader: "header", msgPages: "pages", msgRound: "round", msgState: "state",
	msgReady: "ready", msgGo: "go", msgError: "error",
}

func kindName(k byte) string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("unknown(%d)", k)
}

const (
	pageSize = 4096
	// maxMessage bounds a message so a corrupt length can't make the
	// receiver allocate without limit.
	maxMessage = 64 << 20
	runHeader  = 13
	runZero    = 0
	runData    = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrProtocol is wrapped by every error about a malformed stream.
var ErrProtocol = errors.New("migration stream corrupt")

// RemoteError is an error the peer reported over the stream.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return "peer: " + e.Msg }

// conn frames messages on a stream.
type conn struct {
	r *bufio.Reader
	w *bufio.Writer
	// count is called with the bytes written (for the rate limit and stats).
	count func(n int)
}

func newConn(rw io.ReadWriter) *conn {
	return &conn{r: bufio.NewReaderSize(rw, 1<<20), w: bufio.NewWriterSize(rw, 1<<20)}
}

func (c *conn) writeMagic() error {
	_, err := c.w.Write(Magic[:])
	return err
}

func (c *conn) readMagic() error {
	var m [8]byte
	if _, err := io.ReadFull(c.r, m[:]); err != nil {
		return fmt.Errorf("read stream magic: %w", err)
	}
	if m != Magic {
		return fmt.Errorf("%w: not a kubevmm migration stream (magic %q)", ErrProtocol, m[:])
	}
	return nil
}

func (c *conn) send(kind byte, payload ...[]byte) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	if n > maxMessage {
		return fmt.Errorf("migration message of %d bytes exceeds %d", n, maxMessage)
	}
	var hdr [5]byte
	hdr[0] = kind
	binary.LittleEndian.PutUint32(hdr[1:], uint32(n))
	crc := crc32.Update(0, crcTable, hdr[:])
	if _, err := c.w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range payload {
		crc = crc32.Update(crc, crcTable, p)
		if _, err := c.w.Write(p); err != nil {
			return err
		}
	}
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], crc)
	if _, err := c.w.Write(tail[:]); err != nil {
		return err
	}
	if c.count != nil {
		c.count(n + 9)
	}
	return nil
}

func (c *conn) flush() error { return c.w.Flush() }

// recv reads one message. A message of kind error comes back as a
// *RemoteError.
func (c *conn) recv() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("read message: %w", err)
	}
	n := binary.LittleEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return 0, nil, fmt.Errorf("%w: %s message claims %d bytes", ErrProtocol, kindName(hdr[0]), n)
	}
	payload, err := readPayload(c.r, int(n))
	if err != nil {
		return 0, nil, fmt.Errorf("read %s message (%d bytes): %w", kindName(hdr[0]), n, err)
	}
	var tail [4]byte
	if _, err := io.ReadFull(c.r, tail[:]); err != nil {
		return 0, nil, fmt.Errorf("read %s message checksum: %w", kindName(hdr[0]), err)
	}
	crc := crc32.Update(crc32.Update(0, crcTable, hdr[:]), crcTable, payload)
	if crc != binary.LittleEndian.Uint32(tail[:]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch in %s message", ErrProtocol, kindName(hdr[0]))
	}
	if hdr[0] == msgError {
		return hdr[0], payload, &RemoteError{Msg: string(payload)}
	}
	return hdr[0], payload, nil
}

// expect reads one message of the given kind.
func (c *conn) expect(kind byte) ([]byte, error) {
	k, p, err := c.recv()
	if err != nil {
		return nil, err
	}
	if k != kind {
		return nil, fmt.Errorf("%w: got %s message, want %s", ErrProtocol, kindName(k), kindName(kind))
	}
	return p, nil
}

// readPayload reads n bytes, allocating as they arrive: a peer that claims
// a large message and sends nothing costs the receiver 1 MiB, not the
// claimed size.
func readPayload(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, 1<<20))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), len(b)))
		}
		end := min(cap(b), n)
		if _, err := io.ReadFull(r, b[len(b):end]); err != nil {
			return nil, err
		}
		b = b[:end]
	}
	return b, nil
}
