package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
)

// runQEMU runs the VM in QEMU instead of this VMM (--backend qemu): the
// same fallback path virt-launcher takes for guests that need devices the
// kubevmm VMM doesn't emulate. The console is QEMU's first serial port,
// relayed through the same console hub as the kubevmm backend's.
func runQEMU(f *runFlags, mem uint64, devs devices, s *session) (int, error) {
	if devs.rng || devs.vsock != nil || devs.scsi {
		return 0, usagef("run: --rng, --vsock and --scsi are served by the kubevmm backend only")
	}
	if s.f.api != "" {
		return 0, usagef("run: --api serves the kubevmm backend; with --backend qemu the QMP monitor is the control socket (printed with -v)")
	}
	accel := qemu.Accel(f.accel)
	if accel != qemu.AccelKVM && accel != qemu.AccelTCG {
		return 0, usagef("run: --accel %q: want kvm or tcg", f.accel)
	}
	runDir, err := os.MkdirTemp("", "vmm-qemu-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(runDir)
	cfg := qemuConfig(f, mem, devs, runDir, accel)
	if err := cfg.Validate(); err != nil {
		return 0, usagef("run: %v", err)
	}
	ctx := context.Background()
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		return 0, usagef("run: %v", err)
	}
	s.log.Info("QEMU started", "pid", vm.PID(), "qmp", vm.QMPPath())
	serial, err := net.Dial("unix", cfg.SerialSocket)
	if err != nil {
		_, _ = vm.Kill(ctx) // failing already: the error below is the one to report
		return exitGuest, fmt.Errorf("run: QEMU serial console: %w", err)
	}
	defer serial.Close()
	// Keystrokes QEMU no longer reads have nowhere to go.
	s.con.SetInput(func(b []byte) { _, _ = serial.Write(b) })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := serial.Read(buf)
			_, _ = s.con.Write(buf[:n]) // the console never fails the guest
			if err != nil {
				return
			}
		}
	}()
	if s.socketPath != "" {
		if err := s.con.Listen(s.socketPath); err != nil {
			_, _ = vm.Kill(ctx) // QEMU's exit, reported below, tells how it ended
			return 0, usagef("--console: %v", err)
		}
	} else if s.f.console == "stdio" {
		s.restoreTTY = rawTerminal(s.stdin)
		go s.con.ReadInput(s.stdin)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			_, _ = vm.Kill(ctx) // QEMU's exit, reported below, tells how it ended
		}
	}()
	if err := vm.Resume(ctx); err != nil {
		_, _ = vm.Kill(ctx) // failing already: the error below is the one to report
		return exitGuest, fmt.Errorf("run: start QEMU guest: %w", err)
	}
	exit, err := vm.Wait(ctx)
	s.con.Close()
	if err != nil {
		return exitGuest, fmt.Errorf("run: %w", err)
	}
	s.log.Info("QEMU ended", "after", time.Since(s.start).Round(time.Millisecond), "exit", exit)
	return s.qemuExit(exit), nil
}

// qemuConfig is the QEMU configuration for vmm run's flags.
func qemuConfig(f *runFlags, mem uint64, devs devices, runDir string, accel qemu.Accel) qemu.Config {
	cfg := qemu.Config{
		Name: "vmm", CPUs: f.cpus, MemoryMiB: int(mem >> 20),
		Kernel: f.kernel, Initrd: f.initrd, Cmdline: f.cmdline,
		SerialSocket: runDir + "/serial.sock", RunDir: runDir, Accel: accel,
		NoReboot: true, StartPaused: true, // attach to the console before the guest's first byte
	}
	if f.rtcOffset != 0 {
		cfg.Clock.RTCBase = time.Now().UTC().Add(f.rtcOffset)
	}
	for _, d := range devs.disks {
		cfg.Disks = append(cfg.Disks, qemu.Disk{Path: d.Path, Format: qemu.DiskFormat(d.Format),
			Bus: qemu.DiskBus(d.Bus), ReadOnly: d.ReadOnly, Serial: d.Serial, Queues: d.Queues})
	}
	for _, n := range devs.nics {
		cfg.NICs = append(cfg.NICs, qemu.NIC{Model: qemu.NICModel(n.Model), Tap: n.Tap, MAC: n.MAC.String(), Queues: n.Queues})
	}
	return cfg
}

// qemuExit is vmm run's exit code for how QEMU ended, saying why if the
// guest failed.
func (s *session) qemuExit(exit qemu.Exit) int {
	switch exit.Reason {
	case qemu.ExitGuestShutdown, qemu.ExitHostShutdown, qemu.ExitKilled:
		if exit.ShutdownReason == "guest-panic" {
			break
		}
		return exitOK
	}
	fmt.Fprintf(s.stderr, "vmm: guest failed: QEMU %s\n", oneLine(exit.String()))
	return exitGuest
}
