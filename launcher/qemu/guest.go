package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Debian's ovmf package: the build with secure boot and SMM, and a
// variable store with Microsoft's keys enrolled (what Windows is signed
// with), secure boot on.
const (
	DefaultOVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	DefaultOVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// Clock is the guest's RTC and timers (KubeVirt's domain.clock, mapped as
// libvirt maps it to QEMU). The zero value is QEMU's defaults: an RTC in
// UTC following host time, an HPET, the hv-time clock with HyperV.
type Clock struct {
	// RTCBase is the date and time the RTC reads at start (its offset
	// from host UTC stays as the VM runs); zero is host UTC.
	RTCBase time.Time
	// RTCCatchup delivers the RTC's lost periodic interrupts faster until
	// it has caught up (tick policy catchup: -rtc driftfix=slew).
	RTCCatchup bool
	// RTCTrackGuest runs the RTC on the guest's time, which stops while
	// the VM is paused (track guest: -rtc clock=vm), not on host time.
	RTCTrackGuest bool
	// PITDelay: KVM's in-kernel PIT delivers lost ticks late (tick
	// policy delay, KVM's default, made explicit). QEMU's PIT under TCG
	// has no such setting.
	PITDelay bool
	// HPET: nil leaves QEMU's (on), false removes it.
	HPET *bool
	// HyperVClock is the Hyper-V reference clock (hv-time): nil gives it
	// with HyperV, true gives it anyway, false leaves it out (and the
	// synthetic timers that need it).
	HyperVClock *bool
	// KVMClock false hides kvmclock from the guest (only KVM offers it).
	KVMClock *bool
}

// rtcArg is -rtc's value, "" for QEMU's default.
func (c Clock) rtcArg() string {
	var opts []string
	if !c.RTCBase.IsZero() {
		opts = append(opts, "base="+c.RTCBase.UTC().Format("2006-01-02T15:04:05"))
	}
	if c.RTCCatchup {
		opts = append(opts, "driftfix=slew")
	}
	if c.RTCTrackGuest {
		opts = append(opts, "clock=vm")
	}
	return strings.Join(opts, ",")
}

// clockArgs are the clock's options besides -cpu's.
func (c Config) clockArgs() []string {
	var a []string
	if r := c.Clock.rtcArg(); r != "" {
		a = append(a, "-rtc", r)
	}
	if c.Clock.PITDelay && c.accel() == AccelKVM {
		a = append(a, "-global", "kvm-pit.lost_tick_policy=delay")
	}
	if c.UUID != "" {
		a = append(a, "-uuid", c.UUID)
	}
	return a
}

// machineArg is -machine's value: q35, with the EFI flash devices, SMM
// for secure boot and the HPET switch.
func (c Config) machineArg() string {
	m := "q35"
	if c.firmware() == FirmwareEFI {
		// q35's pflash properties take the block nodes Args defines
		m += ",pflash0=ovmf-code,pflash1=ovmf-vars"
	}
	if c.SecureBoot {
		// OVMF's secure-boot build keeps its variable store behind SMM
		m += ",smm=on"
	}
	if h := c.Clock.HPET; h != nil {
		m += ",hpet=" + onOff(*h)
	}
	return m
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// secureBootArgs make the flash holding the variable store writable only
// from SMM, as the secure-boot build expects.
func (c Config) secureBootArgs() []string {
	if !c.SecureBoot {
		return nil
	}
	return []string{"-global", "driver=cfi.pflash01,property=secure,value=on"}
}

// validateGuest reports what is wrong with the clock, secure boot and
// TPM settings through bad (QEMU itself refuses a malformed UUID).
func (c Config) validateGuest(bad func(string, ...any)) {
	if c.SecureBoot && c.firmware() != FirmwareEFI {
		bad("secure boot needs firmware efi")
	}
	if y := c.Clock.RTCBase.UTC().Year(); !c.Clock.RTCBase.IsZero() && (y < 1900 || y > 9999) {
		bad("rtc base %v: the year must be 1900..9999", c.Clock.RTCBase)
	}
	if c.TPM {
		if len(c.swtpmSocket()) > maxSocketPath {
			bad("run dir %q: too long for the TPM's socket path", c.RunDir)
		}
		if d := c.TPMStateDir; d != "" && !filepath.IsAbs(d) {
			bad("tpm state dir %q: must be absolute", d)
		}
	}
}

// swtpmSocket is the TPM's control socket, between swtpm and QEMU.
func (c Config) swtpmSocket() string { return filepath.Join(c.RunDir, "swtpm.sock") }

// tpmStateDir holds the TPM's state (its NVRAM, keys and PCRs: swtpm's
// tpm2-00.permall): it lives as long as this directory does.
func (c Config) tpmStateDir() string {
	if c.TPMStateDir == "" {
		return filepath.Join(c.RunDir, "tpm")
	}
	return c.TPMStateDir
}

// tpmArgs connect QEMU to swtpm: a TPM 2.0 on the CRB interface, which
// KubeVirt gives x86 guests (libvirt's tpm-crb model) and Windows 11
// accepts.
func (c Config) tpmArgs() []string {
	if !c.TPM {
		return nil
	}
	return []string{
		"-chardev", "socket,id=chrtpm,path=" + optEscape(c.swtpmSocket()),
		"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
		"-device", "tpm-crb,tpmdev=tpm0,id=tpm0-dev",
	}
}

// swtpm is the TPM emulator process of a VM.
type swtpm struct {
	cmd  *exec.Cmd
	ctrl *os.File // the control channel's listening socket, passed to swtpm
}

// prepareTPM makes the state directory and swtpm's control socket and
// returns the command to start (from the thread QEMU forks from, so both
// get the same parent-death signal); nil without a TPM.
func (c Config) prepareTPM(out *tailBuffer) (*swtpm, error) {
	if !c.TPM {
		return nil, nil
	}
	bin := c.SwtpmBinary
	if bin == "" {
		bin = "swtpm"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("qemu %s: the TPM needs swtpm (Debian: hack/deps.sh qemu): %w", c.Name, err)
	}
	if err := os.MkdirAll(c.tpmStateDir(), 0o700); err != nil {
		return nil, fmt.Errorf("qemu %s: TPM state dir: %w", c.Name, err)
	}
	ctrl, err := listenSocket(c.swtpmSocket())
	if err != nil {
		return nil, fmt.Errorf("qemu %s: TPM control socket: %w", c.Name, err)
	}
	cmd := exec.Command(path, "socket", "--tpm2",
		"--tpmstate", "dir="+optEscape(c.tpmStateDir())+",mode=0600",
		"--ctrl", "type=unixio,fd=3",
		// ends when QEMU closes the control channel, when QEMU ends
		"--terminate")
	cmd.ExtraFiles = []*os.File{ctrl}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !c.SurviveLauncherExit {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	cmd.WaitDelay = 5 * time.Second
	return &swtpm{cmd: cmd, ctrl: ctrl}, nil
}

// startWithTPM starts swtpm (if any) and then QEMU, which connects to it
// at start.
func startWithTPM(qemu *exec.Cmd, tpm *swtpm) error {
	if tpm != nil {
		if err := tpm.start(); err != nil {
			return err
		}
	}
	if err := qemu.Start(); err != nil {
		tpm.stop()
		return err
	}
	return nil
}

// start runs swtpm; it reaps it when QEMU is gone (stop).
func (t *swtpm) start() error {
	err := t.cmd.Start()
	_ = t.ctrl.Close() // swtpm has its own copy
	if err != nil {
		return fmt.Errorf("starting swtpm: %w", err)
	}
	return nil
}

// stop ends swtpm once QEMU has: it ends by itself when QEMU closed the
// control channel, and is told to when QEMU never connected. Its state
// is on disk after every TPM command.
func (t *swtpm) stop() {
	if t == nil || t.cmd.Process == nil {
		return
	}
	_ = t.cmd.Process.Signal(syscall.SIGTERM) // fails only when it has ended
	_ = t.cmd.Wait()                          // its exit says nothing QEMU's did not
}
