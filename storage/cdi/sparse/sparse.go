// Package sparse copies a disk image's stream into its file or device
// without writing the chunks that are all zeros, where the target reads
// zeros without them: the importer and the upload server both fill
// volumes this way.
package sparse

import (
	"errors"
	"fmt"
	"io"
)

// Chunk is the unit copied and tested for zeros.
const Chunk = 1 << 20

// ErrTooLarge is returned when a stream is longer than its limit.
var ErrTooLarge = errors.New("the image is larger than its limit")

// Copy copies r to the start of w, skipping the chunks of zeros if
// skipZeros (a file reads zeros where nothing was written; a device may
// hold old data, so it gets every chunk). It returns how many bytes r
// had. More than limit bytes (when not negative) is ErrTooLarge, nothing
// past the limit written. r's own errors are returned as they are,
// io.ErrUnexpectedEOF included (a truncated compressed stream, a body cut
// short): unlike io.ReadFull, Copy never makes one up.
func Copy(w io.WriterAt, r io.Reader, skipZeros bool, limit int64) (int64, error) {
	buf := make([]byte, Chunk)
	var off int64
	for {
		n, err := fill(r, buf)
		if limit >= 0 && off+int64(n) > limit {
			return off, ErrTooLarge
		}
		if n > 0 && (!skipZeros || !AllZero(buf[:n])) {
			if _, werr := w.WriteAt(buf[:n], off); werr != nil {
				return off, fmt.Errorf("writing the disk: %w", werr)
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// fill reads r until buf is full or r ends or fails.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// AllZero reports whether b holds only zeros.
func AllZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
