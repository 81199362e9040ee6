package assist

import (
	"errors"
	"fmt"

	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// maxInsnLen is the architectural limit on x86 instruction length.
const maxInsnLen = 15

var errTruncated = errors.New("instruction bytes truncated")

// insn is a decoded instruction: just the prefixes, opcode bytes and
// ModRM/SIB/displacement forms the assisted instructions use.
type insn struct {
	b     []byte // bytes fetched from RIP (at most maxInsnLen)
	pos   int    // next byte to decode
	len   int    // total length once known
	opsz  bool   // 0x66
	adsz  bool   // 0x67: 32-bit addressing
	rep   bool   // 0xf3
	repne bool   // 0xf2
	lock  bool   // 0xf0
	seg   int    // segment override: segFS, segGS or 0
	rexW  bool
	rexR  bool
	rexX  bool
	rexB  bool

	hasModRM bool
	mod      int
	reg      int // ModRM.reg, REX.R-extended
	rm       int // ModRM.rm, REX.B-extended (register operand)
	rmIsReg  bool
	ea       uint64 // linear address of the memory operand
}

const (
	segFS = 4
	segGS = 5
)

func (in *insn) next() (byte, error) {
	if in.pos >= len(in.b) || in.pos >= maxInsnLen {
		return 0, errTruncated
	}
	c := in.b[in.pos]
	in.pos++
	return c, nil
}

func (in *insn) peek() (byte, error) {
	if in.pos >= len(in.b) || in.pos >= maxInsnLen {
		return 0, errTruncated
	}
	return in.b[in.pos], nil
}

func (in *insn) imm32() (int64, error) {
	var v uint32
	for i := 0; i < 4; i++ {
		c, err := in.next()
		if err != nil {
			return 0, err
		}
		v |= uint32(c) << (8 * i)
	}
	return int64(int32(v)), nil
}

// prefixes consumes legacy prefixes and REX, leaving pos at the opcode.
func (in *insn) prefixes() error {
	for {
		c, err := in.peek()
		if err != nil {
			return err
		}
		switch c {
		case 0x66:
			in.opsz = true
		case 0x67:
			in.adsz = true
		case 0xf3:
			in.rep = true
		case 0xf2:
			in.repne = true
		case 0xf0:
			in.lock = true
		case 0x64:
			in.seg = segFS
		case 0x65:
			in.seg = segGS
		case 0x2e, 0x36, 0x3e, 0x26:
			// CS/SS/DS/ES overrides are ignored in 64-bit mode
		default:
			if c&0xf0 == 0x40 {
				in.pos++
				in.rexW, in.rexR, in.rexX, in.rexB = c&8 != 0, c&4 != 0, c&2 != 0, c&1 != 0
			}
			return nil
		}
		in.pos++
	}
}

// modrm decodes ModRM, SIB and displacement and computes the effective
// linear address of a memory operand. immBytes is the size of an immediate
// that follows (it matters for RIP-relative addressing).
func (in *insn) modrm(r *kvm.Regs, s *kvm.Sregs, immBytes int) error {
	m, err := in.next()
	if err != nil {
		return err
	}
	in.hasModRM = true
	in.mod = int(m >> 6)
	in.reg = int(m>>3&7) | b2i(in.rexR)<<3
	rm := int(m & 7)
	if in.mod == 3 {
		in.rm = rm | b2i(in.rexB)<<3
		in.rmIsReg = true
		in.len = in.pos + immBytes
		return in.checkLen()
	}
	var ea uint64
	ripRel := false
	switch {
	case rm == 4:
		if ea, err = in.sib(r); err != nil {
			return err
		}
	case rm == 5 && in.mod == 0:
		d, err := in.imm32()
		if err != nil {
			return err
		}
		ripRel = true
		ea += uint64(d)
	default:
		ea += *reg(r, rm|b2i(in.rexB)<<3)
	}
	switch in.mod {
	case 1:
		c, err := in.next()
		if err != nil {
			return err
		}
		ea += uint64(int64(int8(c)))
	case 2:
		d, err := in.imm32()
		if err != nil {
			return err
		}
		ea += uint64(d)
	}
	in.len = in.pos + immBytes
	if err := in.checkLen(); err != nil {
		return err
	}
	if ripRel {
		ea += r.RIP + uint64(in.len)
	}
	if in.adsz {
		ea &= 0xffffffff
	}
	switch in.seg {
	case segFS:
		ea += s.FS.Base
	case segGS:
		ea += s.GS.Base
	}
	in.ea = ea
	return nil
}

// sib decodes a SIB byte (and the disp32 that replaces its base with
// mod 0) and returns base + index<<scale.
func (in *insn) sib(r *kvm.Regs) (uint64, error) {
	sib, err := in.next()
	if err != nil {
		return 0, err
	}
	var ea uint64
	scale := sib >> 6
	idx := int(sib>>3&7) | b2i(in.rexX)<<3
	base := int(sib&7) | b2i(in.rexB)<<3
	if idx != 4 {
		ea += *reg(r, idx) << scale
	}
	if base&7 == 5 && in.mod == 0 {
		d, err := in.imm32()
		if err != nil {
			return 0, err
		}
		return ea + uint64(d), nil
	}
	return ea + *reg(r, base), nil
}

func (in *insn) checkLen() error {
	if in.len > maxInsnLen || in.len > len(in.b) {
		return errTruncated
	}
	return nil
}

// finish marks the instruction as ending at the current position (no ModRM).
func (in *insn) finish() { in.len = in.pos }

// decoded is the bytes decoded so far (the whole instruction once known).
func (in *insn) decoded() []byte { return in.b[:min(max(in.len, in.pos), len(in.b))] }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reg returns a pointer to general-purpose register n (0 = RAX ... 15 = R15).
func reg(r *kvm.Regs, n int) *uint64 {
	switch n & 15 {
	case 0:
		return &r.RAX
	case 1:
		return &r.RCX
	case 2:
		return &r.RDX
	case 3:
		return &r.RBX
	case 4:
		return &r.RSP
	case 5:
		return &r.RBP
	case 6:
		return &r.RSI
	case 7:
		return &r.RDI
	case 8:
		return &r.R8
	case 9:
		return &r.R9
	case 10:
		return &r.R10
	case 11:
		return &r.R11
	case 12:
		return &r.R12
	case 13:
		return &r.R13
	case 14:
		return &r.R14
	default:
		return &r.R15
	}
}

// opSize is the operand size in bytes of a 16/32/64-bit instruction.
func (in *insn) opSize() int {
	switch {
	case in.rexW:
		return 8
	case in.opsz:
		return 2
	}
	return 4
}

// writeReg writes v to register n as an instruction of size sz would:
// 32-bit writes zero the upper half, 16-bit writes keep it.
func writeReg(r *kvm.Regs, n, sz int, v uint64) {
	p := reg(r, n)
	switch sz {
	case 8:
		*p = v
	case 4:
		*p = uint64(uint32(v))
	default:
		*p = *p&^0xffff | v&0xffff
	}
}

func truncate(v uint64, sz int) uint64 {
	switch sz {
	case 8:
		return v
	case 4:
		return uint64(uint32(v))
	case 2:
		return uint64(uint16(v))
	}
	return uint64(uint8(v))
}

func hexBytes(b []byte) string {
	s := ""
	for i, c := range b {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%02x", c)
	}
	return s
}
