package acpi

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// A small AML encoder (ACPI 6.4, chapter 20): the few terms the VMM's DSDT
// uses. Every term is built as bytes; names and lengths are checked when
// the table is built, from the VMM's own constants, so they panic on misuse
// rather than return errors nobody could act on.

// AML opcodes and prefixes.
const (
	amlZero        = 0x00
	amlOne         = 0x01
	amlName        = 0x08
	amlBytePrefix  = 0x0a
	amlWordPrefix  = 0x0b
	amlDWordPrefix = 0x0c
	amlString      = 0x0d
	amlQWordPrefix = 0x0e
	amlScope       = 0x10
	amlBuffer      = 0x11
	amlPackage     = 0x12
	amlMethod      = 0x14
	amlDualName    = 0x2e
	amlMultiName   = 0x2f
	amlExtPrefix   = 0x5b
	amlDevice      = 0x82 // after amlExtPrefix
	amlRoot        = '\\'
	amlNotify      = 0x86
	amlOnes        = 0xff
)

// nameString encodes a name path such as `\_SB_.PWRB`, `_HID` or `VR00`.
// Segments shorter than four characters are padded with '_'.
func nameString(path string) []byte {
	var b []byte
	if strings.HasPrefix(path, `\`) {
		b = append(b, amlRoot)
		path = path[1:]
	}
	segs := strings.Split(path, ".")
	switch {
	case len(segs) == 2:
		b = append(b, amlDualName)
	case len(segs) > 2:
		b = append(b, amlMultiName, byte(len(segs)))
	}
	for _, s := range segs {
		b = append(b, nameSeg(s)...)
	}
	return b
}

func nameSeg(s string) []byte {
	if len(s) == 0 || len(s) > 4 {
		panic(fmt.Sprintf("aml: name segment %q is not 1-4 characters", s))
	}
	for i, c := range []byte(s) {
		ok := c == '_' || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			panic(fmt.Sprintf("aml: bad character in name segment %q", s))
		}
	}
	return []byte(s + strings.Repeat("_", 4-len(s)))
}

// pkgLength prefixes body with its PkgLength, which counts itself.
func pkgLength(body []byte) []byte {
	n := len(body)
	if n+1 < 1<<6 {
		return append([]byte{byte(n + 1)}, body...)
	}
	for extra := 1; extra <= 3; extra++ {
		total := n + 1 + extra
		if total < 1<<(4+8*extra) {
			h := []byte{byte(extra<<6) | byte(total&0xf)}
			for i := 0; i < extra; i++ {
				h = append(h, byte(total>>(4+8*i)))
			}
			return append(h, body...)
		}
	}
	panic(fmt.Sprintf("aml: package of %d bytes is too long", n))
}

// integer encodes v in the shortest form.
func integer(v uint64) []byte {
	switch {
	case v == 0:
		return []byte{amlZero}
	case v == 1:
		return []byte{amlOne}
	case v == ^uint64(0):
		return []byte{amlOnes}
	case v <= 0xff:
		return []byte{amlBytePrefix, byte(v)}
	case v <= 0xffff:
		return binary.LittleEndian.AppendUint16([]byte{amlWordPrefix}, uint16(v))
	case v <= 0xffffffff:
		return binary.LittleEndian.AppendUint32([]byte{amlDWordPrefix}, uint32(v))
	}
	return binary.LittleEndian.AppendUint64([]byte{amlQWordPrefix}, v)
}

// str encodes an ASCII string constant.
func str(s string) []byte {
	return append(append([]byte{amlString}, s...), 0)
}

// eisaID compresses a PNP ID such as "PNP0501" into its 32-bit form: three
// letters in 5 bits each, then four hex digits, stored big-endian.
func eisaID(id string) []byte {
	if len(id) != 7 {
		panic(fmt.Sprintf("aml: EISA ID %q is not 7 characters", id))
	}
	var v uint32
	for _, c := range id[:3] {
		v = v<<5 | uint32(c-'@')&0x1f
	}
	for _, c := range id[3:] {
		var d uint32
		switch {
		case c >= '0' && c <= '9':
			d = uint32(c - '0')
		case c >= 'A' && c <= 'F':
			d = uint32(c-'A') + 10
		default:
			panic(fmt.Sprintf("aml: EISA ID %q: %q is not a hex digit", id, c))
		}
		v = v<<4 | d
	}
	return binary.BigEndian.AppendUint32([]byte{amlDWordPrefix}, v)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// name is Name(path, object).
func name(path string, object []byte) []byte {
	return cat([]byte{amlName}, nameString(path), object)
}

// scope is Scope(path) { terms }.
func scope(path string, terms ...[]byte) []byte {
	return cat([]byte{amlScope}, pkgLength(cat(nameString(path), cat(terms...))))
}

// device is Device(path) { terms }.
func device(path string, terms ...[]byte) []byte {
	return cat([]byte{amlExtPrefix, amlDevice}, pkgLength(cat(nameString(path), cat(terms...))))
}

// method is Method(path, args, NotSerialized) { terms }.
func method(path string, args int, terms ...[]byte) []byte {
	if args < 0 || args > 7 {
		panic(fmt.Sprintf("aml: method %s with %d arguments", path, args))
	}
	return cat([]byte{amlMethod}, pkgLength(cat(nameString(path), []byte{byte(args)}, cat(terms...))))
}

// notify is Notify(path, value).
func notify(path string, value uint64) []byte {
	return cat([]byte{amlNotify}, nameString(path), integer(value))
}

// pkg is Package() { elements }.
func pkg(elements ...[]byte) []byte {
	if len(elements) > 0xff {
		panic("aml: package of more than 255 elements")
	}
	return cat([]byte{amlPackage}, pkgLength(cat([]byte{byte(len(elements))}, cat(elements...))))
}

// buffer is Buffer() { data }.
func buffer(data []byte) []byte {
	return cat([]byte{amlBuffer}, pkgLength(cat(integer(uint64(len(data))), data)))
}

// Resource descriptors (ACPI 6.4, 6.4) for _CRS buffers.

// resources is a ResourceTemplate: the descriptors and an end tag (its
// checksum 0: "treat as correct").
func resources(descs ...[]byte) []byte {
	return buffer(cat(cat(descs...), []byte{0x79, 0}))
}

// ioPort is IO(Decode16, base, base, 1, size).
func ioPort(base uint16, size uint8) []byte {
	b := []byte{0x47, 0x01}
	b = binary.LittleEndian.AppendUint16(b, base)
	b = binary.LittleEndian.AppendUint16(b, base)
	return append(b, 1, size)
}

// irqNoFlags is IRQNoFlags() { irq }: an ISA interrupt, edge, active high.
func irqNoFlags(irq uint8) []byte {
	if irq > 15 {
		panic(fmt.Sprintf("aml: ISA IRQ %d", irq))
	}
	return binary.LittleEndian.AppendUint16([]byte{0x22}, 1<<irq)
}

// memory32Fixed is Memory32Fixed(ReadWrite, base, size).
func memory32Fixed(base, size uint32) []byte {
	b := []byte{0x86, 9, 0, 0x01}
	b = binary.LittleEndian.AppendUint32(b, base)
	return binary.LittleEndian.AppendUint32(b, size)
}

// interrupt is Interrupt(ResourceConsumer, Edge, ActiveHigh, Exclusive) { gsi }.
func interrupt(gsi uint32) []byte {
	const consumer, edge = 1 << 0, 1 << 1
	b := []byte{0x89, 6, 0, consumer | edge, 1}
	return binary.LittleEndian.AppendUint32(b, gsi)
}
