package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/console"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/procmem"
	"github.com/kubevmm/kubevmm/vmm/runner"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

type runFlags struct {
	kernel, initrd, cmdline string
	// bootDisk is the disk to boot: --boot-disk, or the --disk marked
	// ,boot (then bootFlag names that flag and the disk is not added
	// again).
	bootDisk, bootFlag string
	cpus               int
	memory             string
	profile            string
	disks, nics        multiFlag
	rng                bool
	scsi               bool
	acpi               bool
	rtcOffset          time.Duration
	vsock              string
	incoming           string
	incomingTLS        tlsFlags
	backend, accel     string
	session            sessionFlags
}

// sessionFlags are the flags of every command that runs a VM in this
// process (run, restore): how to reach it, and what to report.
type sessionFlags struct {
	console string
	api     string
	verbose bool
	report  string
	marks   multiFlag
	// vsockSocket replaces the host socket saved with a restored or
	// received VM's vsock device: on the same host the original path
	// still belongs to the source.
	vsockSocket string
	seccomp     string
	onReboot    string
}

func (s *sessionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.console, "console", "stdio", "serial console: stdio, socket:PATH, or none")
	fs.StringVar(&s.api, "api", "", "serve the control API (pause, snapshot, migrate, ...) on this unix socket")
	fs.BoolVar(&s.verbose, "v", false, "log VMM diagnostics and exit statistics to stderr")
	fs.StringVar(&s.report, "report", "", "write a JSON report (timings, exits, RSS) to this file at exit")
	fs.Var(&s.marks, "mark", "record when this string first appears on the console (repeatable; in the report)")
	fs.StringVar(&s.seccomp, "seccomp", string(seccomp.Kill), "confine the VMM to its system calls once the VM is set up: kill (a call outside the list kills the VMM), log (it is logged by the kernel and runs), or off")
	fs.StringVar(&s.onReboot, "on-reboot", "exit", "what the guest's own reboot does: exit (the VM ends, status 0) or reset (it boots again in this VM; restore: needs --kernel); 'vmm reset' and 'vmm reboot' boot it again either way")
	fs.StringVar(&s.vsockSocket, "vsock-socket", "", "restore, run --incoming: serve the VM's vsock device on this unix socket instead of the one saved with it")
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// parseFlags parses args for command name; it reports help as done.
func parseFlags(fs *flag.FlagSet, name, usage string, args []string, stdout io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: vmm %s %s\n\nflags:\n", name, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, usagef("%s: %v", name, err)
	}
	if fs.NArg() > 0 {
		return false, usagef("%s: unexpected argument %q", name, fs.Arg(0))
	}
	return false, nil
}

// register defines vmm run's flags on fs.
func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kernel, "kernel", "", "Linux kernel: ELF vmlinux or bzImage (required unless --incoming)")
	fs.StringVar(&f.initrd, "initrd", "", "initrd / initramfs image")
	fs.StringVar(&f.cmdline, "cmdline", machine.DefaultCmdline, "kernel command line (with --boot-disk: appended to the boot entry's options)")
	fs.StringVar(&f.bootDisk, "boot-disk", "", "boot the default entry of this disk image (GPT or MBR, ext4): PATH[,format=raw|qcow2] (as --disk); it is also the first virtio disk")
	fs.IntVar(&f.cpus, "cpus", 1, "number of vCPUs")
	fs.StringVar(&f.memory, "memory", "256M", "guest RAM, e.g. 512M or 2G")
	fs.StringVar(&f.profile, "profile", "", "sample guest RIPs at 100 Hz and write them, symbolized with System.map beside the kernel if present, to this file")
	fs.Var(&f.disks, "disk", "virtio disk: PATH[,ro][,format=raw|qcow2][,serial=S][,queues=N][,boot] (repeatable; ,, is a comma in PATH; boot: boot its default entry, as --boot-disk)")
	fs.Var(&f.nics, "net", "virtio NIC: tap=NAME,mac=MAC (repeatable)")
	fs.BoolVar(&f.rng, "rng", false, "add a virtio-rng device")
	fs.BoolVar(&f.scsi, "scsi", false, "add a virtio-scsi controller, empty, for volumes hot-plugged while the VM runs (vmm volume, with --api)")
	fs.BoolVar(&f.acpi, "acpi", true, "describe the VM in ACPI tables (CPUs, devices, power button, poweroff); --acpi=false for a kernel built without ACPI: CPUs from the MP table, virtio devices on the command line")
	fs.DurationVar(&f.rtcOffset, "rtc-offset", 0, "start the guest's RTC this far from host UTC, e.g. 2h or -30m (a clock in another zone or time); snapshots and migrations keep it")
	fs.StringVar(&f.vsock, "vsock", "", "virtio-vsock: cid=N,socket=PATH (host connects to PATH and sends \"CONNECT <port>\\n\")")
	fs.StringVar(&f.backend, "backend", "kubevmm", "kubevmm (this VMM) or qemu (QEMU over QMP: for sata disks, e1000 NICs)")
	fs.StringVar(&f.accel, "accel", "kvm", "QEMU backend only: kvm or tcg (QEMU's emulator)")
	fs.StringVar(&f.incoming, "incoming", "", "instead of booting, receive a live-migrated VM on tcp:HOST:PORT or unix:PATH, then run it; tcp: without --tls-* is unauthenticated: whoever connects first supplies the VM")
	f.incomingTLS.register(fs, "tls-peer-name", "--incoming with TLS: accept only a source whose certificate carries this name (default: any the CA signed)")
	f.session.register(fs)
}

// guest reads the kernel and initrd to boot: the files named, or the boot
// disk's default entry (whose options go before --cmdline, and which is
// attached as the first disk).
func (f *runFlags) guest(sess *session) (kernel, initrd []byte, err error) {
	if f.bootDisk == "" {
		if kernel, initrd, err = readBootFiles(f.kernel, f.initrd); err != nil {
			return nil, nil, usagef("run: %v", err)
		}
		return kernel, initrd, nil
	}
	if f.backend == "qemu" {
		return nil, nil, usagef("run: booting a disk (%s %s) is for the kubevmm backend", f.bootFlag, f.bootDisk)
	}
	b, err := loadBootDisk(f.bootDisk)
	if err != nil {
		return nil, nil, usagef("run: %s %v", f.bootFlag, err)
	}
	sess.log.Info("boot entry", "disk", f.bootDisk, "entry", b.Source, "options", b.Cmdline)
	f.cmdline = strings.TrimSpace(b.Cmdline + " " + f.cmdline)
	if f.bootFlag == "--boot-disk" {
		f.disks = append(multiFlag{f.bootDisk}, f.disks...)
	}
	return b.Kernel, b.Initrd, nil
}

// readBootFiles reads a kernel and an optional initrd.
func readBootFiles(kernel, initrd string) (k, i []byte, err error) {
	if k, err = os.ReadFile(kernel); err != nil {
		return nil, nil, fmt.Errorf("--kernel: %w", err)
	}
	if initrd != "" {
		if i, err = os.ReadFile(initrd); err != nil {
			return nil, nil, fmt.Errorf("--initrd: %w", err)
		}
	}
	return k, i, nil
}

// reloadFiles is how a reset gets the kernel and initrd again
// (machine.Config.Reload): the files are read again.
func reloadFiles(kernel, initrd string) func() ([]byte, []byte, error) {
	return func() ([]byte, []byte, error) { return readBootFiles(kernel, initrd) }
}

// reload is Config.Reload for this run: the files again, or the boot
// disk's entry as it was read (by then the disk is the guest's, and open
// in the VMM under its lock).
func (f *runFlags) reload(kernel, initrd []byte) func() ([]byte, []byte, error) {
	if f.bootDisk != "" {
		return func() ([]byte, []byte, error) { return kernel, initrd, nil }
	}
	return reloadFiles(f.kernel, f.initrd)
}

// findBootDisk sets bootDisk and bootFlag from --boot-disk or the one
// --disk marked ,boot; a VM boots one disk. A --disk that does not parse
// is left to parseDevices to report.
func (f *runFlags) findBootDisk() error {
	if f.bootDisk != "" {
		f.bootFlag = "--boot-disk"
	}
	for _, s := range f.disks {
		if d, err := parseDisk(s); err != nil || !d.Boot {
			continue
		}
		if f.bootDisk != "" {
			return usagef("run: two boot disks (%s %s and --disk %s): boot from one", f.bootFlag, f.bootDisk, s)
		}
		f.bootDisk, f.bootFlag = s, "--disk"
	}
	return nil
}

// checkNumbers checks the flags that are numbers.
func (f *runFlags) checkNumbers() error {
	if f.cpus < 1 {
		return usagef("run: --cpus %d: need at least 1", f.cpus)
	}
	if f.rtcOffset.Abs() > maxRTCOffset {
		return usagef("run: --rtc-offset %v: at most %v either way", f.rtcOffset, maxRTCOffset)
	}
	return nil
}

// maxRTCOffset bounds --rtc-offset: a century either way keeps the RTC
// within its century register's years and QEMU's -rtc base dates.
const maxRTCOffset = 100 * 365 * 24 * time.Hour

// checkNewVM checks the flags of a VM started here (not --incoming): the
// ones only a migration target takes, and where the kernel comes from.
func (f *runFlags) checkNewVM() error {
	if f.session.vsockSocket != "" {
		return usagef("run: --vsock-socket is for --incoming; a new VM takes --vsock cid=N,socket=PATH")
	}
	if f.incomingTLS != (tlsFlags{}) {
		return usagef("run: --tls-* and --tls-peer-name are for --incoming")
	}
	if err := f.findBootDisk(); err != nil {
		return err
	}
	if f.bootDisk != "" && (f.kernel != "" || f.initrd != "") {
		return usagef("run: %s %s takes the kernel and initrd from the disk; drop --kernel/--initrd", f.bootFlag, f.bootDisk)
	}
	if f.kernel == "" && f.bootDisk == "" {
		return usagef("run: --kernel is required (or --boot-disk, or --disk PATH,boot)")
	}
	return nil
}

func cmdRun(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	var f runFlags
	fs := flag.NewFlagSet("vmm run", flag.ContinueOnError)
	f.register(fs)
	if done, err := parseFlags(fs, "run", "--kernel FILE [flags] | --incoming ADDR [flags]", args, stdout); done || err != nil {
		return exitOK, err
	}
	sess, err := newSession(f.session, stdin, stdout, stderr, start)
	if err != nil {
		return 0, err
	}
	defer sess.close()

	if f.incoming != "" {
		if f.kernel != "" || f.initrd != "" || f.bootDisk != "" || len(f.disks) > 0 || len(f.nics) > 0 || f.rtcOffset != 0 {
			return 0, usagef("run: --incoming takes the VM's configuration from the migration source; drop --kernel/--initrd/--boot-disk/--disk/--net/--rtc-offset")
		}
		files, err := f.incomingTLS.files("run", f.incoming)
		if err != nil {
			return 0, err
		}
		m, err := receiveIncoming(f.incoming, files, sess)
		if err != nil {
			return 0, err
		}
		return sess.serve(m, "")
	}
	if err := f.checkNewVM(); err != nil {
		return 0, err
	}
	mem, err := parseSize(f.memory)
	if err != nil {
		return 0, usagef("run: --memory %q: %v", f.memory, err)
	}
	if err := f.checkNumbers(); err != nil {
		return 0, err
	}
	kernel, initrd, err := f.guest(sess)
	if err != nil {
		return 0, err
	}
	devs, err := parseDevices(&f)
	if err != nil {
		return 0, err
	}
	switch f.backend {
	case "qemu":
		return runQEMU(&f, mem, devs, sess)
	case "kubevmm":
	default:
		return 0, usagef("run: --backend %q: want kubevmm or qemu", f.backend)
	}
	cfg := sess.baseConfig()
	cfg.CPUs, cfg.MemoryBytes, cfg.Kernel, cfg.Initrd, cfg.Cmdline = f.cpus, mem, kernel, initrd, f.cmdline
	cfg.NoACPI = !f.acpi
	cfg.RTCOffset = f.rtcOffset
	cfg.Reload = f.reload(kernel, initrd)
	if err := devs.forVMM(&cfg); err != nil {
		return 0, err
	}
	m, err := machine.New(cfg)
	if err != nil {
		return 0, usagef("%v", err)
	}
	profile := ""
	if f.profile != "" && f.kernel != "" {
		profile = f.profile + "|" + filepath.Join(filepath.Dir(f.kernel), "System.map")
	}
	return sess.serve(m, profile)
}

func cmdRestore(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	var dir, kernel, initrd string
	var sf sessionFlags
	fs := flag.NewFlagSet("vmm restore", flag.ContinueOnError)
	fs.StringVar(&dir, "snapshot", "", "snapshot directory written by 'vmm snapshot' (required)")
	fs.StringVar(&kernel, "kernel", "", "the kernel a reset boots (a snapshot does not hold it); without, a reset or reboot ends the VM")
	fs.StringVar(&initrd, "initrd", "", "with --kernel: the initrd a reset boots")
	sf.register(fs)
	if done, err := parseFlags(fs, "restore", "--snapshot DIR [flags]", args, stdout); done || err != nil {
		return exitOK, err
	}
	if dir == "" {
		return 0, usagef("restore: --snapshot is required")
	}
	sess, err := newSession(sf, stdin, stdout, stderr, start)
	if err != nil {
		return 0, err
	}
	defer sess.close()
	if initrd != "" && kernel == "" {
		return 0, usagef("restore: --initrd needs --kernel")
	}
	if sf.onReboot == "reset" && kernel == "" {
		return 0, usagef("restore: --on-reboot reset needs --kernel (a snapshot does not hold the kernel to boot again)")
	}
	base := sess.baseConfig()
	if kernel != "" {
		base.Reload = reloadFiles(kernel, initrd)
	}
	m, err := machine.Restore(dir, base)
	if err != nil {
		return 0, usagef("%v", err)
	}
	sess.log.Info("restored", "snapshot", dir, "took", time.Since(start).Round(time.Microsecond))
	return sess.serve(m, "")
}

// session is one VM run in this process: its console, control socket,
// signals and report.
type session struct {
	f           sessionFlags
	start       time.Time
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
	con         *console.Console
	socketPath  string
	seccomp     seccomp.Mode
	marks       map[string]<-chan time.Time
	firstOutput <-chan time.Time
	restoreTTY  func()
	sigs        chan os.Signal
	sigsReady   chan struct{} // closed once sigs is notified of SIGINT and SIGTERM
	log         *slog.Logger
}

func newSession(f sessionFlags, stdin io.Reader, stdout, stderr io.Writer, start time.Time) (*session, error) {
	s := &session{f: f, start: start, stdin: stdin, stdout: stdout, stderr: stderr, restoreTTY: func() {},
		sigs: make(chan os.Signal, 1), sigsReady: make(chan struct{})}
	// The first signal.Notify waits for the runtime to start a thread for
	// signal masks: 1-20 ms on a loaded host, which would delay the vCPU
	// entry; it goes on beside the VM's setup instead. A signal that
	// arrives before the VM runs stops it as soon as it does.
	go func() {
		signal.Notify(s.sigs, syscall.SIGINT, syscall.SIGTERM)
		close(s.sigsReady)
	}()
	s.log = s.logger()
	if f.onReboot != "exit" && f.onReboot != "reset" {
		return nil, usagef("--on-reboot %q: want exit or reset", f.onReboot)
	}
	mode, err := seccomp.ParseMode(f.seccomp)
	if err != nil {
		return nil, usagef("--seccomp: %v", err)
	}
	s.seccomp = mode
	var sinks []io.Writer
	switch {
	case f.console == "stdio":
		sinks = append(sinks, stdout)
	case f.console == "none":
	case strings.HasPrefix(f.console, "socket:") && len(f.console) > len("socket:"):
		s.socketPath = strings.TrimPrefix(f.console, "socket:")
	default:
		return nil, usagef("--console %q: want stdio, socket:PATH or none", f.console)
	}
	s.con = console.New(sinks...)
	s.marks = map[string]<-chan time.Time{}
	for _, m := range f.marks {
		s.marks[m] = s.con.Watch(m)
	}
	s.firstOutput = s.con.Watch("")
	return s, nil
}

func (s *session) close() {
	<-s.sigsReady
	signal.Stop(s.sigs)
	s.con.Close()
	s.restoreTTY()
}

// logger is the session's structured log: with -v, text lines on stderr
// (the machine's included); without, nothing, so that stderr carries only
// the one-line errors of the CLI contract.
func (s *session) logger() *slog.Logger {
	if !s.f.verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(s.stderr, nil)).With("component", "vmm")
}

// baseConfig is the runtime part of a machine's configuration.
func (s *session) baseConfig() machine.Config {
	c := machine.Config{Console: s.con}
	if s.f.vsockSocket != "" {
		c.Vsock = &machine.VsockConfig{Socket: s.f.vsockSocket}
	}
	c.Logger = s.log
	c.RebootResets = s.f.onReboot == "reset"
	return c
}

// serve connects the console and the API to m, runs it until it ends and
// reports. profile is "OUT|SYSTEM.MAP" to sample guest RIPs.
func (s *session) serve(m *machine.Machine, profile string) (int, error) {
	defer func() {
		if err := m.Close(); err != nil {
			// A disk that failed to flush: said even without -v.
			fmt.Fprintf(s.stderr, "vmm: releasing the VM: %v\n", err)
		}
	}()
	// The machine is set up (kernel loaded, images and taps open, guest
	// RAM mapped): from here on the VMM needs only the calls of a running
	// VM, serving its sockets included, so the API socket appearing means
	// the filter is in place.
	phases := m.Phases()
	phase := func(name string) { phases = append(phases, machine.Phase{Name: name, At: time.Now()}) }
	<-s.sigsReady // and its thread started before the filter
	phase("signals")
	if err := seccomp.Install(s.seccomp); err != nil {
		return 0, usagef("--seccomp=%s: %v", s.seccomp, err)
	}
	phase("seccomp")
	r := runner.New(m, m.Config().CPUs, m.Config().MemoryBytes)
	s.con.SetInput(m.Serial.Input)
	if s.socketPath != "" {
		if err := s.con.Listen(s.socketPath); err != nil {
			return 0, usagef("--console: %v", err)
		}
	} else if s.f.console == "stdio" {
		s.restoreTTY = rawTerminal(s.stdin)
		go s.con.ReadInput(s.stdin)
	}
	if s.f.api != "" {
		srv, err := api.Listen(s.f.api, r)
		if err != nil {
			return 0, usagef("--api: %v", err)
		}
		defer srv.Close()
	}
	phase("sockets")
	go func() {
		if _, ok := <-s.sigs; ok {
			if err := r.Stop(); err != nil {
				fmt.Fprintf(s.stderr, "vmm: stop: %v\n", err)
			}
		}
	}()

	var prof *machine.Profiler
	if profile != "" {
		prof = m.StartProfile(10 * time.Millisecond)
	}
	setup := time.Since(s.start)
	exit := r.Run()
	if prof != nil {
		out, symbols, _ := strings.Cut(profile, "|")
		if err := writeProfile(out, prof.Stop(), symbols); err != nil {
			fmt.Fprintf(s.stderr, "vmm: write profile: %v\n", err)
		}
	}
	total := time.Since(s.start)
	s.con.Close()
	s.writeReport(m, r, exit, phases, setup, total)
	if exit.Failed() {
		fmt.Fprintf(s.stderr, "vmm: guest failed: %s\n", oneLine(exit.String()))
		return exitGuest, nil
	}
	s.log.Info("guest ended", "exit", exit.String())
	return exitOK, nil
}

// writeReport logs (-v) and writes (--report) how the run went; phases
// are the setup's timing points.
func (s *session) writeReport(m *machine.Machine, r *runner.Runner, exit machine.Exit, phases []machine.Phase, setup, total time.Duration) {
	mem, err := procmem.Self(m.GuestRAM())
	if err != nil {
		fmt.Fprintf(s.stderr, "vmm: %v\n", err)
	}

	rep := report{
		Exit:     string(exit.Reason),
		SetupMs:  ms(setup),
		TotalMs:  ms(total),
		Marks:    map[string]float64{},
		Stats:    m.Stats(),
		RSS:      readRSS(),
		Memory:   mem,
		Cmdline:  m.Cmdline,
		CPUs:     m.Config().CPUs,
		MemoryMB: m.Config().MemoryBytes >> 20,
	}
	if exit.Err != nil {
		rep.Error = exit.Err.Error()
	}
	if mig := r.Migration(); mig.Stats.Phase != "" {
		rep.Migration = &mig.Stats
	}
	entered := m.Entered()
	if entered.IsZero() { // stopped before a vCPU ran
		entered = m.Started()
	}
	rep.VCPUEntryMs = ms(entered.Sub(s.start))
	for _, p := range append(phases, machine.Phase{Name: "vcpu entry", At: entered}) {
		rep.Phases = append(rep.Phases, phaseMs{p.Name, ms(p.At.Sub(s.start))})
	}
	if t, ok := received(s.firstOutput); ok {
		rep.FirstOutputMs = ms(t.Sub(s.start))
	}
	for str, ch := range s.marks {
		if t, ok := received(ch); ok {
			rep.Marks[str] = ms(t.Sub(s.start))
		}
	}
	if s.f.verbose {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(s.stderr, "vmm: %s\n", b)
	}
	if s.f.report != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(s.f.report, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(s.stderr, "vmm: write report: %v\n", err)
		}
	}
}

type report struct {
	Exit          string             `json:"exit"`
	Error         string             `json:"error,omitempty"`
	CPUs          int                `json:"cpus"`
	MemoryMB      uint64             `json:"memory_mib"`
	Cmdline       string             `json:"cmdline"`
	SetupMs       float64            `json:"setup_ms"`
	VCPUEntryMs   float64            `json:"vcpu_entry_ms"`
	Phases        []phaseMs          `json:"phases_ms"` // when each setup step ended, from process start
	FirstOutputMs float64            `json:"first_output_ms,omitempty"`
	Marks         map[string]float64 `json:"marks_ms"`
	TotalMs       float64            `json:"total_ms"`
	RSS           map[string]uint64  `json:"rss_kib"`
	Memory        procmem.Breakdown  `json:"memory"` // where the RSS goes, at exit
	Stats         map[string]any     `json:"stats"`
	Migration     *migration.Stats   `json:"migration,omitempty"`
}

// phaseMs is a timing point of the report.
type phaseMs struct {
	Name string  `json:"name"`
	Ms   float64 `json:"ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func received(ch <-chan time.Time) (time.Time, bool) {
	select {
	case t, ok := <-ch:
		return t, ok
	default:
		return time.Time{}, false
	}
}

// readRSS reports the VMM's resident memory from /proc: guest RAM is a
// shared memfd mapping (RssShmem), so RssAnon+RssFile is the VMM's own
// overhead.
func readRSS() map[string]uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem":
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			out[k] = n
		}
	}
	return out
}

// parseSize parses sizes like 256M, 1G, 512MiB, 1048576 (bytes).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := uint64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		case 'T':
			mult, t = 1<<40, t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("not a size (use e.g. 256M or 2G)")
	}
	if v > (1<<63)/mult {
		return 0, fmt.Errorf("too large")
	}
	return v * mult, nil
}
