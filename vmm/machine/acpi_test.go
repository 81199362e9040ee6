package machine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/arch/x86/acpi"
	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
)

// TestACPISleepControl runs guest code that writes the FADT's sleep
// control register as Linux's poweroff does: S5 ends the VM as a
// shutdown, a sleep state the DSDT does not offer is ignored (the guest
// then resets).
func TestACPISleepControl(t *testing.T) {
	sleepOut := func(v byte) []byte { return []byte{0xb0, v, 0x66, 0xba, 0x00, 0x06, 0xee} } // mov al, v; mov dx, 0x600; out dx, al
	reset := []byte{0xb0, 0xfe, 0xe6, 0x64}                                                  // mov al, 0xfe; out 0x64, al
	halt := []byte{0xf4, 0xeb, 0xfd}                                                         // hlt; jmp back
	for _, tc := range []struct {
		name string
		code []byte
		want ExitReason
	}{
		{"S5", cat(sleepOut(acpi.SleepTypeS5<<2|1<<5), reset, halt), ExitShutdown},
		{"S5 without SLP_EN", cat(sleepOut(acpi.SleepTypeS5<<2), reset, halt), ExitReset},
		{"S3", cat(sleepOut(3<<2|1<<5), reset, halt), ExitReset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(Config{CPUs: 1, MemoryBytes: 32 << 20, Kernel: boottest.TinyELF(tc.code, 0x100000)})
			require.NoError(t, err)
			defer m.Close()
			exit := m.Run()
			assert.Equal(t, tc.want, exit.Reason)
			assert.False(t, exit.Failed())
		})
	}
}

// TestACPITablesInGuestMemory: the RSDP is where Linux scans for it, and
// only when the VM has ACPI.
func TestACPITablesInGuestMemory(t *testing.T) {
	for _, noACPI := range []bool{false, true} {
		m, err := New(Config{CPUs: 2, MemoryBytes: 32 << 20, Kernel: boottest.TinyELF([]byte{0xf4}, 0x100000), NoACPI: noACPI})
		require.NoError(t, err)
		sig := make([]byte, 8)
		require.NoError(t, m.Memory().ReadAt(sig, acpi.RSDPAddr))
		if noACPI {
			assert.Equal(t, make([]byte, 8), sig, "no tables with NoACPI")
		} else {
			assert.Equal(t, "RSD PTR ", string(sig))
		}
		require.NoError(t, m.Close())
	}
}
