package qemu

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// TestGuestIntegrationArgs: the clock, timers, UUID, secure boot and TPM
// on QEMU's command line, as libvirt gives them to QEMU for KubeVirt.
func TestGuestIntegrationArgs(t *testing.T) {
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	windows := func(accel Accel) Config {
		c := minimal()
		c.Accel, c.Firmware, c.SecureBoot, c.TPM, c.HyperV = accel, FirmwareEFI, true, true, true
		c.UUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"
		c.Clock = Clock{RTCCatchup: true, PITDelay: true, HPET: ptr.To(false), HyperVClock: ptr.To(true)}
		return c
	}
	for _, tc := range []struct {
		name    string
		cfg     func() Config
		machine string
		rtc     []string
		cpu     string
		globals []string
		tpm     bool
		uuid    []string
	}{
		{name: "vmi-windows.yaml on TCG", cfg: func() Config { return windows(AccelTCG) },
			machine: "q35,pflash0=ovmf-code,pflash1=ovmf-vars,smm=on,hpet=off", rtc: []string{"driftfix=slew"},
			cpu:     "qemu64,hv-relaxed=on,hv-vapic=on,hv-spinlocks=0x1fff,hv-time=on",
			globals: []string{"driver=cfi.pflash01,property=secure,value=on"}, tpm: true,
			uuid: []string{"5d307ca9-b3ef-428c-8861-06e72d69f223"}},
		{name: "vmi-windows.yaml on KVM: the in-kernel PIT's policy", cfg: func() Config { return windows(AccelKVM) },
			machine: "q35,pflash0=ovmf-code,pflash1=ovmf-vars,smm=on,hpet=off", rtc: []string{"driftfix=slew"},
			cpu: "host,hv-relaxed=on,hv-vapic=on,hv-spinlocks=0x1fff,hv-time=on,hv-vpindex=on,hv-runtime=on,hv-synic=on," +
				"hv-stimer=on,hv-reset=on,hv-frequencies=on,hv-tlbflush=on,hv-ipi=on",
			globals: []string{"kvm-pit.lost_tick_policy=delay", "driver=cfi.pflash01,property=secure,value=on"}, tpm: true,
			uuid: []string{"5d307ca9-b3ef-428c-8861-06e72d69f223"}},
		{name: "an RTC from a date, on guest time, HPET kept", cfg: func() Config {
			c := minimal()
			c.Clock = Clock{RTCBase: base.In(time.FixedZone("x", 3600)), RTCTrackGuest: true, HPET: ptr.To(true)}
			return c
		}, machine: "q35,hpet=on", rtc: []string{"base=2030-01-02T03:04:05,clock=vm"}, cpu: "host"},
		{name: "no Hyper-V clock: no synthetic timers either", cfg: func() Config {
			c := minimal()
			c.HyperV, c.Clock.HyperVClock, c.Clock.KVMClock = true, ptr.To(false), ptr.To(false)
			return c
		}, machine: "q35", cpu: "host,hv-relaxed=on,hv-vapic=on,hv-spinlocks=0x1fff,hv-vpindex=on,hv-runtime=on,hv-synic=on," +
			"hv-reset=on,hv-frequencies=on,hv-tlbflush=on,hv-ipi=on,kvmclock=off"},
		{name: "the Hyper-V clock alone", cfg: func() Config {
			c := minimal()
			c.Accel, c.Clock.HyperVClock = AccelTCG, ptr.To(true)
			return c
		}, machine: "q35", cpu: "qemu64,hv-time=on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg()
			args, err := c.Args()
			require.NoError(t, err)
			assert.Equal(t, []string{tc.machine}, values(args, "-machine"))
			assert.Equal(t, tc.rtc, values(args, "-rtc"))
			assert.Equal(t, []string{tc.cpu}, values(args, "-cpu"))
			assert.Equal(t, tc.globals, values(args, "-global"))
			assert.Equal(t, tc.uuid, values(args, "-uuid"))
			if !tc.tpm {
				assert.Empty(t, values(args, "-tpmdev"))
				return
			}
			assert.Contains(t, values(args, "-chardev"), "socket,id=chrtpm,path=/run/kubevmm/vm/swtpm.sock")
			assert.Equal(t, []string{"emulator,id=tpm0,chardev=chrtpm"}, values(args, "-tpmdev"))
			assert.Contains(t, values(args, "-device"), "tpm-crb,tpmdev=tpm0,id=tpm0-dev")
			assert.Equal(t, DefaultOVMFSecureCode, c.ovmfCode())
			assert.Equal(t, DefaultOVMFSecureVars, c.ovmfVars())
		})
	}

	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"secure boot on BIOS", func(c *Config) { c.SecureBoot = true }, "secure boot needs firmware efi"},
		{"relative TPM state", func(c *Config) { c.TPM, c.TPMStateDir = true, "tpm" }, `tpm state dir "tpm": must be absolute`},
		{"RTC before 1900", func(c *Config) { c.Clock.RTCBase = time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC) }, "the year must be 1900..9999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := minimal()
			tc.modify(&c)
			assert.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

// TestWindowsClassDomain runs the domain of KubeVirt's vmi-windows.yaml on
// real QEMU (TCG), swtpm and Debian's secure-boot OVMF, without a disk (no
// Windows image here): the TPM is the emulator's, the RTC reads the date
// it was given, and OVMF enforces secure boot, refusing to start its own
// unsigned shell. The TPM's state stays in the state directory after the
// VM ends.
func TestWindowsClassDomain(t *testing.T) {
	requireQEMU(t)
	swtpmBin := hosttools.Require(t, "swtpm")
	for _, f := range []string{DefaultOVMFSecureCode, DefaultOVMFSecureVars} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("OVMF's secure-boot build not installed (hack/deps.sh qemu): %v", err)
		}
	}
	ctx := testCtx(t, bootTime)
	dir := t.TempDir()
	base := time.Now().UTC().Add(-36 * time.Hour).Truncate(time.Second)
	cfg := Config{Name: "win", CPUs: 2, MemoryMiB: 256, Accel: AccelTCG, Firmware: FirmwareEFI, SecureBoot: true,
		TPM: true, TPMStateDir: filepath.Join(dir, "tpm-state"), SwtpmBinary: swtpmBin, HyperV: true,
		UUID:        "5d307ca9-b3ef-428c-8861-06e72d69f223",
		Clock:       Clock{RTCBase: base, RTCCatchup: true, PITDelay: true, HPET: ptr.To(false), HyperVClock: ptr.To(true)},
		StartPaused: true, RunDir: filepath.Join(dir, "run"), SerialSocket: filepath.Join(dir, "serial.sock")}
	vm := startVM(t, ctx, cfg)
	mon, err := vm.Monitor(ctx)
	require.NoError(t, err)

	var tpms []struct {
		Model   string `json:"model"`
		Options struct {
			Type string `json:"type"`
		} `json:"options"`
	}
	require.NoError(t, mon.Execute(ctx, "query-tpm", nil, &tpms))
	require.Len(t, tpms, 1)
	assert.Equal(t, "tpm-crb", tpms[0].Model)
	assert.Equal(t, "emulator", tpms[0].Options.Type)

	var rtc struct {
		Year  int `json:"tm_year"`
		Month int `json:"tm_mon"`
		Day   int `json:"tm_mday"`
		Hour  int `json:"tm_hour"`
	}
	require.NoError(t, mon.Execute(ctx, "qom-get", map[string]any{"path": "/machine", "property": "rtc-time"}, &rtc))
	// The RTC runs from base: within the hours this test can take, it reads
	// base's day and hour or a later one, never host time's.
	got := time.Date(rtc.Year+1900, time.Month(rtc.Month+1), rtc.Day, rtc.Hour, 0, 0, 0, time.UTC)
	assert.False(t, got.Before(base.Truncate(time.Hour)), "RTC %v before its base %v", got, base)
	assert.True(t, got.Before(time.Now().UTC().Add(-24*time.Hour)), "RTC %v does not run from its base %v", got, base)
	var hpet bool
	require.NoError(t, mon.Execute(ctx, "qom-get", map[string]any{"path": "/machine", "property": "hpet"}, &hpet))
	assert.False(t, hpet)

	con := attachConsole(t, ctx, vm)
	require.NoError(t, vm.Resume(ctx))
	con.waitContains(t, ctx, 0, "Security Violation")
	st, err := vm.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, "running", st.State)

	ex, err := vm.Kill(ctx)
	require.NoError(t, err)
	assert.Equal(t, ExitKilled, ex.Reason)
	require.NotNil(t, vm.tpm.cmd.ProcessState, "swtpm is reaped with QEMU")
	_, err = os.Stat(filepath.Join(cfg.TPMStateDir, "tpm2-00.permall"))
	assert.NoError(t, err, "the TPM's state outlives the VM")
}
