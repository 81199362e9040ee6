package acpi

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

var testConfig = Config{
	CPUs:       3,
	LAPICAddr:  0xfee00000,
	IOAPICAddr: 0xfec00000,
	Serial:     []Serial{{Port: 0x3f8, IRQ: 4}},
	Virtio: []MMIODevice{
		{Base: 0xd0000000, Size: 0x1000, GSI: 5},
		{Base: 0xd0001000, Size: 0x1000, GSI: 6},
	},
}

// tables walks the RSDP -> XSDT -> tables chain (and FADT -> DSDT) the way
// a guest does, checking every checksum and length on the way, and returns
// the tables by signature.
func tables(t *testing.T, b []byte, base uint64) map[string][]byte {
	t.Helper()
	le := binary.LittleEndian
	sum := func(p []byte) byte {
		var s byte
		for _, c := range p {
			s += c
		}
		return s
	}
	require.Equal(t, "RSD PTR ", string(b[:8]))
	require.Zero(t, sum(b[:20]), "RSDP checksum (first 20 bytes)")
	require.Equal(t, byte(2), b[15], "RSDP revision")
	require.Equal(t, uint32(rsdpSize), le.Uint32(b[20:]))
	require.Zero(t, sum(b[:rsdpSize]), "RSDP extended checksum")
	at := func(addr uint64) []byte {
		t.Helper()
		require.GreaterOrEqual(t, addr, base)
		off := addr - base
		require.LessOrEqual(t, off+headerSize, uint64(len(b)))
		n := uint64(le.Uint32(b[off+4:]))
		require.LessOrEqual(t, off+n, uint64(len(b)), "table at %#x runs past the blob", addr)
		tb := b[off : off+n]
		require.Zero(t, sum(tb), "checksum of %s", tb[:4])
		return tb
	}
	out := map[string][]byte{}
	xsdt := at(le.Uint64(b[24:]))
	require.Equal(t, "XSDT", string(xsdt[:4]))
	out["XSDT"] = xsdt
	for off := headerSize; off < len(xsdt); off += 8 {
		tb := at(le.Uint64(xsdt[off:]))
		out[string(tb[:4])] = tb
	}
	fadt := out["FACP"]
	require.NotNil(t, fadt)
	require.Len(t, fadt, fadtSize)
	dsdt := at(le.Uint64(fadt[140:]))
	require.Equal(t, uint64(le.Uint32(fadt[40:])), le.Uint64(fadt[140:]), "DSDT and X_DSDT agree")
	out["DSDT"] = dsdt
	return out
}

func TestTablesChecksumsAndLinks(t *testing.T) {
	b, err := Build(testConfig, RSDPAddr)
	require.NoError(t, err)
	got := tables(t, b, RSDPAddr)
	for _, sig := range []string{"XSDT", "FACP", "APIC", "DSDT"} {
		assert.Contains(t, got, sig)
	}
	assert.LessOrEqual(t, RSDPAddr+len(b), tablesEnd)
	// the largest VM still fits below 1 MiB
	big := testConfig
	big.CPUs = MaxCPUs
	for i := 0; i < 18; i++ {
		big.Virtio = append(big.Virtio, MMIODevice{Base: 0xd0000000 + uint32(i)*0x1000, Size: 0x1000, GSI: uint32(5 + i)})
	}
	b, err = Build(big, RSDPAddr)
	require.NoError(t, err)
	tables(t, b, RSDPAddr)
	assert.LessOrEqual(t, RSDPAddr+len(b), tablesEnd)
}

func TestBuildRefusesCPUCounts(t *testing.T) {
	for _, n := range []int{0, -1, MaxCPUs + 1} {
		c := testConfig
		c.CPUs = n
		_, err := Build(c, RSDPAddr)
		assert.ErrorContains(t, err, fmt.Sprintf("%d vCPUs", n))
	}
}

// TestTablesDisassemble reads every table back with ACPICA's disassembler,
// the parser Linux's ACPI code comes from: a layout or AML mistake shows as
// an error or as fields with other values.
func TestTablesDisassemble(t *testing.T) {
	iasl := hosttools.Require(t, "iasl")
	b, err := Build(testConfig, RSDPAddr)
	require.NoError(t, err)
	dir := t.TempDir()
	want := map[string][]string{
		"XSDT": {"ACPI Table Address   0 : ", "ACPI Table Address   1 : "},
		"FACP": {
			"Revision : 06",
			"Hardware Reduced (V5) : 1",
			"Control Method Power Button (V1) : 1",
			"Sleep Control Register : [Generic Address Structure]",
			"Space ID : 01 [SystemIO]",
			"Address : 0000000000000600",
			"Address : 0000000000000601",
		},
		"APIC": {
			"Local Apic Address : FEE00000",
			"Local Apic ID : 00", "Local Apic ID : 01", "Local Apic ID : 02",
			"I/O Apic ID : 03",
			"Address : FEC00000",
			"Subtable Type : 02 [Interrupt Source Override]",
			"Subtable Type : 04 [Local APIC NMI]",
			"Interrupt Input LINT : 01",
		},
		"DSDT": {
			`Name (_HID, EisaId ("PNP0501")`,
			"IO (Decode16,\n                    0x03F8,",
			"IRQNoFlags ()\n                    {4}",
			`Name (_HID, EisaId ("PNP0C0C")`,
			`Name (_HID, "ACPI0013"`,
			"Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive, ,, )\n                {\n                    0x00000003,",
			"Method (_EVT, 1, NotSerialized)",
			"Notify (\\_SB.PWRB, 0x80)",
			`Device (VR01)`,
			`Name (_HID, "LNRO0005")`,
			"Memory32Fixed (ReadWrite,\n                    0xD0001000,         // Address Base\n                    0x00001000,",
			"0x00000006,",
			"Name (\\_S5, Package (0x02)",
		},
	}
	for sig, tb := range tables(t, b, RSDPAddr) {
		t.Run(sig, func(t *testing.T) {
			dat := filepath.Join(dir, sig+".dat")
			require.NoError(t, os.WriteFile(dat, tb, 0o644))
			out, err := exec.Command(iasl, "-d", dat).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.NotRegexp(t, `(?i)\b(error|warning)\b`, string(out))
			dsl, err := os.ReadFile(strings.TrimSuffix(dat, ".dat") + ".dsl")
			require.NoError(t, err)
			text := spaces.Replace(string(dsl))
			for _, w := range want[sig] {
				assert.Contains(t, text, spaces.Replace(w), "%s.dsl:\n%s", sig, dsl)
			}
		})
	}
}

// spaces folds runs of padding iasl uses to align columns.
var spaces = strings.NewReplacer("    ", " ", "   ", " ", "  ", " ")

func TestPkgLength(t *testing.T) {
	for _, tc := range []struct {
		body int
		head []byte
	}{
		{0, []byte{1}},
		{62, []byte{63}},
		{63, []byte{0x41, 0x04}},         // 65 = 0x041: low nibble 1, then 0x04
		{4093, []byte{0x4f, 0xff}},       // 4095
		{4094, []byte{0x81, 0x00, 0x01}}, // 4097
		{1<<20 - 4, []byte{0x8f, 0xff, 0xff}},
		{1<<20 - 3, []byte{0xc1, 0x00, 0x00, 0x01}}, // 1<<20 + 1,
	} {
		got := pkgLength(make([]byte, tc.body))
		assert.Equal(t, tc.head, got[:len(tc.head)], "body of %d bytes", tc.body)
		assert.Len(t, got, tc.body+len(tc.head))
	}
}

func TestAMLTerms(t *testing.T) {
	assert.Equal(t, []byte{0x0c, 0x41, 0xd0, 0x05, 0x01}, eisaID("PNP0501"))
	assert.Equal(t, []byte{0x0c, 0x41, 0xd0, 0x0c, 0x0c}, eisaID("PNP0C0C"))
	assert.Equal(t, append([]byte{'\\', 0x2e}, "_SB_PWRB"...), nameString(`\_SB_.PWRB`))
	assert.Equal(t, []byte("_S5_"), nameString("_S5"))
	assert.Equal(t, append([]byte{0x2f, 3}, "ABCDEFGHIJKL"...), nameString("ABCD.EFGH.IJKL"))
	for v, want := range map[uint64][]byte{
		0: {0}, 1: {1}, 0xff: {0x0a, 0xff}, 0x100: {0x0b, 0, 1},
		0x10000: {0x0c, 0, 0, 1, 0}, 1 << 32: {0x0e, 0, 0, 0, 0, 1, 0, 0, 0}, ^uint64(0): {0xff},
	} {
		assert.Equal(t, want, integer(v), "%#x", v)
	}
}
