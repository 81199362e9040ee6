// Package boottest makes kernels for tests that need a VM to run code of
// their own instead of Linux.
package boottest

import "encoding/binary"

// TinyELF is a minimal ELF64 executable whose one loadable segment puts
// code at guest physical address paddr and whose entry point is its first
// byte: the VMM's ELF loader starts it in 64-bit mode at CPL 0.
func TinyELF(code []byte, paddr uint64) []byte {
	const phoff, codeOff = 64, 0x1000
	b := make([]byte, codeOff+len(code))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le.PutUint16(b[16:], 2)  // ET_EXEC
	le.PutUint16(b[18:], 62) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], paddr) // entry
	le.PutUint64(b[32:], phoff)
	le.PutUint16(b[52:], 64) // ehsize
	le.PutUint16(b[54:], 56) // phentsize
	le.PutUint16(b[56:], 1)  // phnum
	ph := b[phoff:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // R+X
	le.PutUint64(ph[8:], codeOff)
	le.PutUint64(ph[16:], paddr)
	le.PutUint64(ph[24:], paddr)
	le.PutUint64(ph[32:], uint64(len(code)))
	le.PutUint64(ph[40:], uint64(len(code)))
	le.PutUint64(ph[48:], 0x1000)
	copy(b[codeOff:], code)
	return b
}
