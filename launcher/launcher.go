// Package launcher is virt-launcher: the main process of a VMI's pod. It
// reads the VMI the controller put into the pod, picks the backend (our
// VMM in this process, or QEMU for what only QEMU emulates), waits for the
// pod network virt-handler prepares, boots the guest, and serves the VMM
// control API and the serial console on sockets in the directory it shares
// with virt-handler. It has no API access and needs no root.
//
// Lifecycle, as virt-handler sees it through the control socket:
//
//	Starting  socket up, guest not yet running (waiting for the taps)
//	Running / Paused
//	Stopped   the guest ended; Info says how, and exit.json records it
//
// After the guest ends the launcher keeps answering until its pod is
// deleted (SIGTERM), so the handler reads the end instead of guessing it.
//
// SIGTERM (pod deletion) is the graceful path: the launcher asks the
// guest to shut down, through its guest agent when one is connected (our
// VMM: the agent listens on vsock, see guestagent.go), else by the ACPI
// power button (both backends have one); the guest has the VMI's grace
// period to power off, after which it is stopped. virt-handler does the
// same at the VMI's deletion (asking, waiting, stopping through the
// control API), so the pod normally only ever sees SIGTERM after the
// guest has ended.
package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/cloudinit"
	"github.com/kubevmm/kubevmm/vmm/api"
	bootdisk "github.com/kubevmm/kubevmm/vmm/boot/disk"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

// Options configure one launcher run.
type Options struct {
	// VMIFile is the VMI JSON (KUBEVMM_VMI_FILE).
	VMIFile string
	Paths   Paths
	// Log gets the launcher's own messages; Console the guest's serial
	// output (both the container's stdout in a pod).
	Log     io.Writer
	Console io.Writer
	// QEMUBinary for the QEMU backend ("" is qemu-system-x86_64 from PATH).
	QEMUBinary string
	// Linger is how long the launcher keeps answering after the guest
	// ended without being asked to stop; 0 is until ctx ends.
	Linger time.Duration
	// Incoming makes this launcher the target of a live migration
	// (KUBEVMM_MIGRATION_INCOMING, set on migration target pods): instead
	// of booting, it receives the running guest on this address
	// (tcp:HOST:PORT or unix:PATH) and runs it.
	Incoming string
	// Seccomp confines the process to the VMM's system calls once a
	// kubevmm guest is set up, in the mode SeccompAnnotation picks (kill
	// by default). virt-launcher sets it; tests that run the launcher
	// in-process leave it off, as the filter would confine them too.
	Seccomp bool
	// QEMUWatchdog tunes how the QEMU backend notices a hung monitor; the
	// zero value is the production setting.
	QEMUWatchdog Watchdog
}

// ReadVMI reads and decodes the VMI file.
func ReadVMI(path string) (*v1.VirtualMachineInstance, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the VMI: %w", err)
	}
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal(b, vmi); err != nil {
		return nil, fmt.Errorf("decoding the VMI from %s: %w", path, err)
	}
	if vmi.Name == "" || vmi.UID == "" {
		return nil, fmt.Errorf("the VMI in %s has no name or UID", path)
	}
	return vmi, nil
}

// Run runs the VMI until the guest ends and ctx is done (SIGTERM), and
// returns the process exit code: 0 if the guest ended cleanly (powered
// off, rebooted with reboot=k, stopped), 1 if it failed.
func Run(ctx context.Context, o Options) (int, error) {
	// One JSON line per event, in the pod's log; the VMM's own lines (its
	// state changes) carry component=vmm.
	log := slog.New(slog.NewJSONHandler(o.Log, nil)).With("component", "virt-launcher")
	vmi, backendName, why, cfg, err := prepare(o, log)
	if err != nil {
		return 1, err
	}
	log = log.With("vmi", vmi.Namespace+"/"+vmi.Name)
	logf := func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) }
	sandbox, err := seccompMode(o, vmi, backendName)
	if err != nil {
		return 1, err
	}
	grace := time.Duration(vmispec.GracePeriodSeconds(&vmi.Spec)) * time.Second

	if err := os.MkdirAll(o.Paths.SocketDir, 0o755); err != nil {
		return 1, fmt.Errorf("socket directory: %w", err)
	}
	// A stale exit record belongs to an earlier launcher of this VMI.
	os.Remove(filepath.Join(o.Paths.SocketDir, vmispec.ExitFile))
	sw := &switchVM{name: string(backendName), reason: why, rebootResets: cfg.RebootResets}
	stopServing, err := serve(ctx, o.Paths.SocketDir, sw, log, logf)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 1, err
	}
	defer stopServing()

	// Before the guest started: ended (stopped) or failed, recorded for
	// virt-handler either way.
	stopped := func(why string) (int, error) {
		logf("%s", why)
		_ = sw.Stop() // no backend yet: this only records the stop
		writeExit(o.Paths.SocketDir, sw.Info(), logf)
		return 0, nil
	}
	failed := func(err error) (int, error) {
		sw.fail(err)
		writeExit(o.Paths.SocketDir, sw.Info(), logf)
		log.Error("the guest could not start", "error", err)
		// Answer the handler until the pod goes, so it reads the reason.
		lingerUntil(ctx, o.Linger)
		return 1, err
	}
	stopDHCP, err := readyNetwork(ctx, o.Paths, cfg.NICs, vmispec.GuestHostname(vmi), log, logf)
	if err != nil {
		if ctx.Err() != nil {
			return stopped("stopped before the guest started")
		}
		return failed(err)
	}
	defer stopDHCP()

	t0 := time.Now()
	be, err := startBackend(ctx, o, backendName, cfg, vmi, sw, log, sandbox)
	if err != nil {
		if ctx.Err() != nil && o.Incoming != "" {
			// Deleted while waiting for the migration: nothing ran here.
			return stopped("stopped before a migration arrived")
		}
		return failed(err)
	}
	defer func() {
		if err := be.Close(); err != nil {
			logf("releasing the VM: %v", err)
		}
	}()
	if !sw.set(be) {
		// Stopped while starting.
		if err := be.Stop(); err != nil {
			logf("stop: %v", err)
		}
	}
	if o.Incoming != "" {
		log.Info("guest received: it runs here now", "from", o.Incoming, "took", time.Since(t0).Round(time.Millisecond))
	} else {
		log.Info("guest started", "backend", backendName, "took", time.Since(t0).Round(time.Millisecond))
	}

	return untilGuestEnds(ctx, o, be, sw, grace, log, logf), nil
}

// untilGuestEnds waits for the guest to end, records how it did, and
// keeps answering virt-handler until the pod goes; it returns the
// launcher's exit code.
func untilGuestEnds(ctx context.Context, o Options, be backend, sw *switchVM, grace time.Duration, log *slog.Logger, logf func(string, ...any)) int {
	waitForGuest(ctx, be, sw, grace, log)
	info := be.Info()
	log.Info("guest ended", "state", info.State, "exit", info.Exit, "error", info.Error)
	writeExit(o.Paths.SocketDir, info, logf)
	if info.State == api.StateMigrated {
		// The guest runs on the migration target now and virt-handler,
		// which stopped this end, has read what it needs: this pod is done.
		return 0
	}
	code := 0
	if be.Failed() {
		code = 1
	}
	lingerUntil(ctx, o.Linger)
	return code
}

// pollAgent polls the guest agent through the vsock device at socket for
// as long as the guest runs (also while the launcher is asked to stop:
// the graceful shutdown goes through it), but not while it is paused.
func pollAgent(socket string, be backend, sw *switchVM, log *slog.Logger) {
	p := newAgentPoller(socket, log.With("component", "guest-agent"))
	p.running = func() bool { return be.Info().State != api.StatePaused }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-be.Done()
		cancel()
	}()
	sw.setAgent(p)
	go p.run(ctx)
}

// prepare reads the VMI and picks its backend (with why) and VM
// configuration. A VMI that boots a disk has that disk's image read here:
// whether our VMM can boot it depends on its boot entry.
func prepare(o Options, log *slog.Logger) (*v1.VirtualMachineInstance, vmispec.Backend, string, VMConfig, error) {
	vmi, err := ReadVMI(o.VMIFile)
	if err != nil {
		return nil, "", "", VMConfig{}, err
	}
	var entry *bootdisk.Boot
	check := func(disk int) (err error) {
		entry, err = readBootEntry(vmi, o.Paths, disk)
		return err
	}
	backendName, why, err := vmispec.SelectBackend(vmi.Annotations, &vmi.Spec, check)
	if err != nil {
		return nil, "", "", VMConfig{}, err
	}
	log.Info("backend selected", "vmi", vmi.Namespace+"/"+vmi.Name, "uid", vmi.UID, "backend", backendName, "why", why)
	if o.Incoming != "" && backendName != vmispec.BackendKubevmm {
		// Refused before anything runs: the controller does not migrate
		// such VMIs (LiveMigratable is False), so this is a bad pod.
		return nil, "", "", VMConfig{}, fmt.Errorf("live migration target: the %s backend cannot receive a migration (only kubevmm can)", backendName)
	}
	cfg, err := BuildVMConfig(vmi, o.Paths)
	if err != nil {
		return nil, "", "", VMConfig{}, err
	}
	// entry is nil for a kernelBoot without kernelPath: MachineConfig
	// refuses that. A migration target receives its guest instead.
	if backendName == vmispec.BackendKubevmm && cfg.Kernel == "" && entry != nil && o.Incoming == "" {
		log.Info("booting the disk's default entry", "entry", entry.Source, "options", entry.Cmdline)
		cfg.DiskBoot = entry
	}
	// The volumes' images, before any guest runs. A migration target
	// finds a shared claim's image made by the source.
	if err := prepareVolumeDisks(vmi, o.Paths, log); err != nil {
		return nil, "", "", VMConfig{}, err
	}
	// The cloud-init disk, before any guest runs. A migration target
	// renders it too: the same VMI and Secrets give the same image, at
	// the path the source's disk state names.
	if v := cloudinit.Volume(&vmi.Spec); v != nil {
		if _, err := cloudinit.Write(vmi, o.Paths.SecretDir, cloudInitDisk(o.Paths, v.Name)); err != nil {
			return nil, "", "", VMConfig{}, err
		}
		log.Info("cloud-init disk written", "volume", v.Name)
	}
	return vmi, backendName, why, cfg, nil
}

// seccompMode is the VMM's sandbox for this VMI: with o.Seccomp, kill
// unless the VMI's annotation asks for log or off (debugging); the QEMU
// backend is not filtered.
func seccompMode(o Options, vmi *v1.VirtualMachineInstance, backendName vmispec.Backend) (seccomp.Mode, error) {
	if !o.Seccomp || backendName != vmispec.BackendKubevmm {
		return seccomp.Off, nil
	}
	a := vmi.Annotations[vmispec.SeccompAnnotation]
	if a == "" {
		a = string(seccomp.Kill)
	}
	m, err := seccomp.ParseMode(a)
	if err != nil {
		return seccomp.Off, fmt.Errorf("annotation %s: %w", vmispec.SeccompAnnotation, err)
	}
	return m, nil
}

// startBackend starts the guest on the selected backend, or receives it
// when this pod is a migration target.
func startBackend(ctx context.Context, o Options, backendName vmispec.Backend, cfg VMConfig, vmi *v1.VirtualMachineInstance, sw *switchVM, log *slog.Logger, sandbox seccomp.Mode) (backend, error) {
	consolePath := filepath.Join(o.Paths.SocketDir, vmispec.ConsoleSocket)
	logf := func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) }
	vsockPath := filepath.Join(o.Paths.SocketDir, vmispec.VsockSocket)
	// Our VMM's guests have the guest agent's vsock device.
	withAgent := func(b *kubevmmBackend, err error) (backend, error) {
		if err == nil {
			pollAgent(vsockPath, b, sw, log)
		}
		return b, err
	}
	switch {
	case o.Incoming != "":
		return withAgent(receiveKubevmm(ctx, o.Incoming, cfg, consolePath, vsockPath, &lineLog{w: o.Console}, sw, log, sandbox))
	case backendName == vmispec.BackendKubevmm:
		return withAgent(startKubevmm(cfg, consolePath, &lineLog{w: o.Console}, log.With("component", "vmm"), sandbox))
	case backendName == vmispec.BackendQEMU:
		if err := os.MkdirAll(o.Paths.RunDir, 0o700); err != nil {
			return nil, err
		}
		qc, err := qemuStartConfig(cfg, vmi, o)
		if err != nil {
			return nil, err
		}
		return startQEMU(ctx, qc, consolePath, &lineLog{w: o.Console}, logf)
	}
	return nil, fmt.Errorf("backend %q", backendName)
}

// waitForGuest returns when the guest has ended. Asked to stop (ctx done),
// it asks the guest to shut down (through its agent when connected, else
// by the ACPI power button), gives the guest its grace period to power
// off, then stops it.
func waitForGuest(ctx context.Context, be backend, sw *switchVM, grace time.Duration, log *slog.Logger) {
	select {
	case <-be.Done():
		return
	case <-ctx.Done():
	}
	res, err := sw.Shutdown()
	if err != nil {
		log.Warn("asking the guest to shut down", "error", err)
	}
	log.Info("asked to stop: the guest was asked to shut down; it may power off, then it is stopped", "via", res.Via, "grace", grace)
	select {
	case <-be.Done():
	case <-time.After(grace):
		if err := be.Stop(); err != nil {
			log.Warn("stopping the guest", "error", err)
		}
		<-be.Done()
	}
}

// listenWhenWritable serves the control API once the socket directory is
// writable: the kubelet creates it as root, and virt-handler hands it to
// the launcher's user when it sees the VMI on its node.
func listenWhenWritable(ctx context.Context, dir string, vm api.VM, logf func(string, ...any)) (*api.Server, error) {
	path := filepath.Join(dir, vmispec.ControlSocket)
	logged := false
	for {
		srv, err := api.Listen(path, vm)
		if err == nil || !errors.Is(err, os.ErrPermission) {
			return srv, err
		}
		if !logged {
			logf("waiting for virt-handler to hand over %s", dir)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(tapPollInterval):
		}
	}
}

// serve serves the control API and takes hot-plugged volumes' images
// once the socket directory is ours; the function returned stops both.
func serve(ctx context.Context, dir string, sw *switchVM, log *slog.Logger, logf func(string, ...any)) (func(), error) {
	srv, err := listenWhenWritable(ctx, dir, sw, logf)
	if err != nil {
		return nil, err
	}
	hp, err := listenVolumeFiles(dir, sw, log)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return func() {
		_ = hp.Close()
		_ = srv.Close()
	}, nil
}

// listenVolumeFiles takes the images of hot-plugged volumes virt-handler
// opened (vmispec.HotplugSocket), once the socket directory is ours.
func listenVolumeFiles(dir string, sw *switchVM, log *slog.Logger) (*net.UnixListener, error) {
	path := filepath.Join(dir, vmispec.HotplugSocket)
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("hot-plug socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("hot-plug socket: %w", err)
	}
	go func() {
		if err := api.ServeVolumeFiles(l, sw.AttachVolumeFile); err != nil {
			log.Warn("hot-plug socket", "error", err)
		}
	}()
	return l, nil
}

func lingerUntil(ctx context.Context, d time.Duration) {
	if d <= 0 {
		<-ctx.Done()
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// writeExit records how the guest ended, for a virt-handler that comes
// back after this launcher is gone.
func writeExit(dir string, info api.Info, logf func(string, ...any)) {
	b, _ := json.Marshal(info)
	tmp := filepath.Join(dir, vmispec.ExitFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		err = os.Rename(tmp, filepath.Join(dir, vmispec.ExitFile))
		if err != nil {
			logf("recording the exit: %v", err)
		}
	} else {
		logf("recording the exit: %v", err)
	}
}

// readyNetwork waits for the NICs' taps, which are virt-handler's to
// create in this pod's network namespace: until they exist there is
// nothing to attach the NICs to, a NIC that takes the pod interface's MAC
// does not know it, and a lease has no device to be served on. Then it
// starts the DHCP servers (before the guest, so that its first
// DHCPDISCOVER is answered); stop closes them.
func readyNetwork(ctx context.Context, p Paths, nics []NICConfig, hostname string, log *slog.Logger, logf func(string, ...any)) (stop func(), err error) {
	if err := waitForTaps(ctx, p.SysClassNet, nics, logf); err != nil {
		return nil, err
	}
	return serveDHCP(p, nics, hostname, log)
}

// tapPollInterval: /sys/class/net has no notification a non-root process
// in the pod can use cheaply; the wait is a few seconds at most.
const tapPollInterval = 100 * time.Millisecond

// waitForTaps waits for the NICs' taps, then gives the NICs that take the
// pod interface's MAC the one virt-handler recorded (readPodMACs).
func waitForTaps(ctx context.Context, sysClassNet string, nics []NICConfig, logf func(string, ...any)) error {
	for i, n := range nics {
		path := filepath.Join(sysClassNet, n.Tap)
		logged := false
		for {
			if _, err := os.Stat(path); err == nil {
				break
			} else if !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("tap %s: %w", n.Tap, err)
			}
			if !logged {
				logf("waiting for virt-handler to create %s (interface %d, %s)", n.Tap, i, n.Name)
				logged = true
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(tapPollInterval):
			}
		}
	}
	return readPodMACs(sysClassNet, nics)
}

// lineLog passes guest output to w (the container log). Writes never fail,
// so a broken log cannot stall the console.
type lineLog struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineLog) Write(p []byte) (int, error) {
	if l == nil || l.w == nil {
		return len(p), nil
	}
	l.mu.Lock()
	// The console log must not stop the guest: a failed write is dropped.
	_, _ = l.w.Write(p)
	l.mu.Unlock()
	return len(p), nil
}
