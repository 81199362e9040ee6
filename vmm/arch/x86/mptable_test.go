package x86

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/memory"
)

func lowMem(t *testing.T) *memory.Guest {
	t.Helper()
	mem, err := memory.New([]memory.Layout{{GPA: 0, Size: 2 << 20}})
	require.NoError(t, err)
	t.Cleanup(func() { mem.Close() })
	return mem
}

func sum(b []byte) byte {
	var s byte
	for _, c := range b {
		s += c
	}
	return s
}

// mpTable is an MP configuration table read back from guest memory the
// way a guest kernel does (Intel MP spec 1.4, chapter 4).
type mpTable struct {
	cpus []struct {
		apicID byte
		flags  byte
	}
	busISA   int // bus id of the "ISA" bus entry, -1 if none
	ioapicID byte
	ioapic   uint32
	ioIntrs  []struct{ srcBus, srcIRQ, dstAPIC, dstPin byte }
	locals   []struct{ typ, dstPin byte }
	entries  int
}

func readMP(t *testing.T, mem *memory.Guest) mpTable {
	t.Helper()
	le := binary.LittleEndian
	fp := make([]byte, 16)
	require.NoError(t, mem.ReadAt(fp, EBDAStart))
	require.Equal(t, "_MP_", string(fp[:4]), "floating pointer signature at the EBDA")
	require.Zero(t, sum(fp), "floating pointer checksum")
	require.Equal(t, byte(1), fp[8], "floating pointer is one 16-byte paragraph")
	require.Equal(t, byte(4), fp[9], "MP spec 1.4")
	require.Zero(t, fp[11], "feature byte 1 = 0: a configuration table is present")
	addr := uint64(le.Uint32(fp[4:]))

	hdr := make([]byte, 44)
	require.NoError(t, mem.ReadAt(hdr, addr))
	require.Equal(t, "PCMP", string(hdr[:4]))
	length := int(le.Uint16(hdr[4:]))
	tbl := make([]byte, length)
	require.NoError(t, mem.ReadAt(tbl, addr))
	require.Zero(t, sum(tbl), "configuration table checksum")
	assert.Equal(t, uint32(LAPICAddr), le.Uint32(hdr[36:]))
	assert.Zero(t, le.Uint16(hdr[40:]), "no extended table")

	m := mpTable{busISA: -1, entries: int(le.Uint16(hdr[34:]))}
	p, n := tbl[44:], 0
	for len(p) > 0 {
		n++
		switch p[0] {
		case 0:
			m.cpus = append(m.cpus, struct {
				apicID byte
				flags  byte
			}{p[1], p[3]})
			p = p[20:]
			continue
		case 1:
			if string(p[2:8]) == "ISA   " {
				m.busISA = int(p[1])
			}
		case 2:
			m.ioapicID, m.ioapic = p[1], le.Uint32(p[4:])
			assert.Equal(t, byte(1), p[3]&1, "IOAPIC enabled")
		case 3:
			m.ioIntrs = append(m.ioIntrs, struct{ srcBus, srcIRQ, dstAPIC, dstPin byte }{p[4], p[5], p[6], p[7]})
		case 4:
			m.locals = append(m.locals, struct{ typ, dstPin byte }{p[1], p[7]})
		default:
			t.Fatalf("unknown MP entry type %d", p[0])
		}
		p = p[8:]
	}
	assert.Equal(t, m.entries, n, "entry count matches the entries")
	return m
}

func TestMPTable(t *testing.T) {
	for _, ncpus := range []int{1, 2, 4, MaxCPUs} {
		t.Run(fmt.Sprint(ncpus), func(t *testing.T) {
			mem := lowMem(t)
			n, err := WriteMPTable(mem, ncpus)
			require.NoError(t, err)
			assert.LessOrEqual(t, uint64(EBDAStart+n), uint64(HighMemStart), "below 1 MiB")

			m := readMP(t, mem)
			require.Len(t, m.cpus, ncpus)
			for i, c := range m.cpus {
				assert.Equal(t, byte(i), c.apicID, "APIC ID of CPU %d", i)
				assert.Equal(t, byte(1), c.flags&1, "CPU %d enabled", i)
				assert.Equal(t, i == 0, c.flags&2 != 0, "BSP flag on CPU 0 only (CPU %d)", i)
			}
			assert.Equal(t, byte(ncpus), m.ioapicID, "IOAPIC ID after the CPUs'")
			assert.Equal(t, uint32(IOAPICAddr), m.ioapic)
			require.GreaterOrEqual(t, m.busISA, 0, "an ISA bus")
			require.Len(t, m.ioIntrs, 24, "one entry per IOAPIC pin")
			for i, in := range m.ioIntrs {
				assert.Equal(t, byte(m.busISA), in.srcBus)
				assert.Equal(t, byte(i), in.srcIRQ)
				assert.Equal(t, m.ioapicID, in.dstAPIC)
				assert.Equal(t, byte(i), in.dstPin, "IRQ %d identity-mapped to its IOAPIC pin", i)
			}
			assert.Equal(t, []struct{ typ, dstPin byte }{{3, 0}, {1, 1}}, m.locals, "ExtINT on LINT0, NMI on LINT1")
		})
	}
}

func TestMPTableBounds(t *testing.T) {
	for _, n := range []int{-1, 0, MaxCPUs + 1, 255, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			mem := lowMem(t)
			_, err := WriteMPTable(mem, n)
			require.Error(t, err)
			fp := make([]byte, 4)
			require.NoError(t, mem.ReadAt(fp, EBDAStart))
			assert.Equal(t, []byte{0, 0, 0, 0}, fp, "nothing written")
		})
	}
	t.Run("RAM too small", func(t *testing.T) {
		mem, err := memory.New([]memory.Layout{{GPA: 0, Size: 0x9f000}})
		require.NoError(t, err)
		defer mem.Close()
		_, err = WriteMPTable(mem, 1)
		assert.ErrorIs(t, err, memory.ErrOutOfRange)
	})
}
