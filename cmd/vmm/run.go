package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/vmm/console"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

type runFlags struct {
	kernel, initrd, cmdline string
	cpus                    int
	memory                  string
	console                 string
	verbose                 bool
	report                  string
	profile                 string
	marks                   multiFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func cmdRun(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	start := time.Now()
	var f runFlags
	fs := flag.NewFlagSet("vmm run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.kernel, "kernel", "", "Linux kernel: ELF vmlinux or bzImage (required)")
	fs.StringVar(&f.initrd, "initrd", "", "initrd / initramfs image")
	fs.StringVar(&f.cmdline, "cmdline", machine.DefaultCmdline, "kernel command line")
	fs.IntVar(&f.cpus, "cpus", 1, "number of vCPUs")
	fs.StringVar(&f.memory, "memory", "256M", "guest RAM, e.g. 512M or 2G")
	fs.StringVar(&f.console, "console", "stdio", "serial console: stdio, socket:PATH, or none")
	fs.BoolVar(&f.verbose, "v", false, "log VMM diagnostics and exit statistics to stderr")
	fs.StringVar(&f.report, "report", "", "write a JSON report (timings, exits, RSS) to this file at exit")
	fs.StringVar(&f.profile, "profile", "", "sample guest RIPs at 100 Hz and write them, symbolized with System.map beside the kernel if present, to this file")
	fs.Var(&f.marks, "mark", "record when this string first appears on the console (repeatable; in the report)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: vmm run --kernel FILE [flags]\n\nflags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return exitOK, nil
		}
		return 0, usagef("run: %v", err)
	}
	if fs.NArg() > 0 {
		return 0, usagef("run: unexpected argument %q", fs.Arg(0))
	}
	if f.kernel == "" {
		return 0, usagef("run: --kernel is required")
	}
	mem, err := parseSize(f.memory)
	if err != nil {
		return 0, usagef("run: --memory %q: %v", f.memory, err)
	}
	if f.cpus < 1 {
		return 0, usagef("run: --cpus %d: need at least 1", f.cpus)
	}
	kernel, err := os.ReadFile(f.kernel)
	if err != nil {
		return 0, usagef("run: --kernel: %v", err)
	}
	var initrd []byte
	if f.initrd != "" {
		if initrd, err = os.ReadFile(f.initrd); err != nil {
			return 0, usagef("run: --initrd: %v", err)
		}
	}

	var sinks []io.Writer
	var socketPath string
	switch {
	case f.console == "stdio":
		sinks = append(sinks, stdout)
	case f.console == "none":
	case strings.HasPrefix(f.console, "socket:") && len(f.console) > len("socket:"):
		socketPath = strings.TrimPrefix(f.console, "socket:")
	default:
		return 0, usagef("run: --console %q: want stdio, socket:PATH or none", f.console)
	}
	con := console.New(sinks...)
	defer con.Close()
	marks := map[string]<-chan time.Time{}
	for _, s := range f.marks {
		marks[s] = con.Watch(s)
	}
	firstOutput := con.Watch("")

	var logw io.Writer
	if f.verbose {
		logw = stderr
	}
	m, err := machine.New(machine.Config{
		CPUs:        f.cpus,
		MemoryBytes: mem,
		Kernel:      kernel,
		Initrd:      initrd,
		Cmdline:     f.cmdline,
		Console:     con,
		Log:         logw,
	})
	if err != nil {
		return 0, usagef("%v", err)
	}
	defer m.Close()
	con.SetInput(m.Serial.Input)
	if socketPath != "" {
		if err := con.Listen(socketPath); err != nil {
			return 0, usagef("run: --console: %v", err)
		}
	} else if f.console == "stdio" {
		restore := rawTerminal(stdin)
		defer restore()
		go con.ReadInput(stdin)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			m.Stop()
		}
	}()

	var prof *machine.Profiler
	if f.profile != "" {
		prof = m.StartProfile(10 * time.Millisecond)
	}
	setup := time.Since(start)
	exit := m.Run()
	if prof != nil {
		if err := writeProfile(f.profile, prof.Stop(), filepath.Join(filepath.Dir(f.kernel), "System.map")); err != nil {
			fmt.Fprintf(stderr, "vmm: write profile: %v\n", err)
		}
	}
	total := time.Since(start)
	con.Close()

	rep := report{
		Exit:     string(exit.Reason),
		SetupMs:  ms(setup),
		TotalMs:  ms(total),
		Marks:    map[string]float64{},
		Stats:    m.Stats(),
		RSS:      readRSS(),
		Cmdline:  m.Cmdline,
		CPUs:     f.cpus,
		MemoryMB: mem >> 20,
	}
	if exit.Err != nil {
		rep.Error = exit.Err.Error()
	}
	rep.VCPUEntryMs = ms(m.Started().Sub(start))
	if t, ok := received(firstOutput); ok {
		rep.FirstOutputMs = ms(t.Sub(start))
	}
	for s, ch := range marks {
		if t, ok := received(ch); ok {
			rep.Marks[s] = ms(t.Sub(start))
		}
	}
	if f.verbose {
		b, _ := json.Marshal(rep)
		fmt.Fprintf(stderr, "vmm: %s\n", b)
	}
	if f.report != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(f.report, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(stderr, "vmm: write report: %v\n", err)
		}
	}
	if exit.Failed() {
		fmt.Fprintf(stderr, "vmm: guest failed: %s\n", oneLine(exit.String()))
		return exitGuest, nil
	}
	if f.verbose {
		fmt.Fprintf(stderr, "vmm: guest ended: %s\n", exit)
	}
	return exitOK, nil
}

type report struct {
	Exit          string             `json:"exit"`
	Error         string             `json:"error,omitempty"`
	CPUs          int                `json:"cpus"`
	MemoryMB      uint64             `json:"memory_mib"`
	Cmdline       string             `json:"cmdline"`
	SetupMs       float64            `json:"setup_ms"`
	VCPUEntryMs   float64            `json:"vcpu_entry_ms"`
	FirstOutputMs float64            `json:"first_output_ms,omitempty"`
	Marks         map[string]float64 `json:"marks_ms"`
	TotalMs       float64            `json:"total_ms"`
	RSS           map[string]uint64  `json:"rss_kib"`
	Stats         map[string]any     `json:"stats"`
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
