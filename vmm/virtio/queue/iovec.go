package queue

import "golang.org/x/sys/unix"

// Buffers is a scatter-gather list: a chain's readable or writable buffers
// seen as one byte stream.
type Buffers [][]byte

// Len is the total length.
func (b Buffers) Len() uint64 {
	var n uint64
	for _, s := range b {
		n += uint64(len(s))
	}
	return n
}

// ReadAt copies bytes of the stream starting at off into dst and returns
// how many it copied (less than len(dst) at the end of the stream).
func (b Buffers) ReadAt(dst []byte, off uint64) int {
	n := 0
	for _, s := range b {
		if n == len(dst) {
			break
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		n += copy(dst[n:], s[off:])
		off = 0
	}
	return n
}

// WriteAt copies src into the stream at off and returns how many bytes it
// placed (less than len(src) at the end of the stream).
func (b Buffers) WriteAt(src []byte, off uint64) int {
	n := 0
	for _, s := range b {
		if n == len(src) {
			break
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		n += copy(s[off:], src[n:])
		off = 0
	}
	return n
}

// Slice returns the sub-list covering [off, off+n) of the stream, appended
// to dst, without copying data. It covers less when the stream is shorter.
func (b Buffers) Slice(dst Buffers, off, n uint64) Buffers {
	for _, s := range b {
		if n == 0 {
			break
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		s = s[off:]
		off = 0
		if uint64(len(s)) > n {
			s = s[:n]
		}
		dst = append(dst, s)
		n -= uint64(len(s))
	}
	return dst
}

// Iovecs appends the buffers to dst as iovecs for readv(2) or writev(2),
// skipping empty ones: a device that keeps dst moves data between a file
// and guest buffers without allocating.
func (b Buffers) Iovecs(dst []unix.Iovec) []unix.Iovec {
	for _, s := range b {
		if len(s) == 0 {
			continue
		}
		v := unix.Iovec{Base: &s[0]}
		v.SetLen(len(s))
		dst = append(dst, v)
	}
	return dst
}
