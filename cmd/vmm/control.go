package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// receiveIncoming listens on addr for one migration stream, builds the VM
// it carries and returns it ready to run.
// With tlsFiles only sources that authenticate with mutual TLS get through;
// every other connection is refused and the wait goes on.
func receiveIncoming(addr string, tlsFiles *migration.TLSFiles, s *session) (*machine.Machine, error) {
	l, err := api.ListenAddress(addr)
	if err != nil {
		return nil, usagef("run: --incoming: %v", err)
	}
	defer l.Close()
	if tlsFiles != nil {
		if l, err = migration.Authenticate(l, tlsFiles, func(from net.Addr, err error) {
			fmt.Fprintf(s.stderr, "vmm: incoming migration: refused %s: %s\n", from, oneLine(err.Error()))
		}); err != nil {
			return nil, usagef("run: --incoming: %v", err)
		}
		defer l.Close()
	}
	s.log.Info("waiting for a migration", "address", l.Addr().String())
	for {
		conn, err := l.Accept()
		if err != nil {
			return nil, usagef("run: --incoming: %v", err)
		}
		in := machine.NewIncoming(s.baseConfig())
		in.PostCopyFailed = func(err error) {
			// The guest is gone: the source died holding pages it needs.
			// vCPUs waiting for them can't be stopped; exiting frees them.
			s.restoreTTY()
			fmt.Fprintf(s.stderr, "vmm: %s\n", oneLine(err.Error()))
			os.Exit(exitGuest)
		}
		start := time.Now()
		st, err := migration.Receive(context.Background(), conn, in)
		if err != nil || !st.PostCopy {
			// In post-copy the stream stays open for the missing pages.
			conn.Close()
		}
		if err != nil {
			// A failed attempt leaves nothing behind here and the source
			// keeps its guest: wait for the next attempt.
			fmt.Fprintf(s.stderr, "vmm: incoming migration failed, waiting for another: %s\n", oneLine(err.Error()))
			continue
		}
		s.log.Info("received the VM", "took", time.Since(start).Round(time.Millisecond), "rounds", st.Rounds,
			"data_pages", st.DataPages, "zero_pages", st.ZeroPages, "post_copy_pages", st.MissingPages)
		return in.Machine, nil
	}
}

// clientFlags are the flags of commands that talk to a running VMM.
func clientFlags(fs *flag.FlagSet) *string {
	return fs.String("api", "", "the VMM's control socket (vmm run --api) (required)")
}

func client(sock string, name string) (*api.Client, error) {
	if sock == "" {
		return nil, usagef("%s: --api is required", name)
	}
	return api.NewClient(sock), nil
}

// cmdControl runs pause, resume, stop, reset, reboot and status.
func cmdControl(name string, args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("vmm "+name, flag.ContinueOnError)
	sock := clientFlags(fs)
	usage := "--api SOCKET"
	var graceful *bool
	var timeout *time.Duration
	if name == "stop" {
		usage += " [--graceful [--timeout D]]"
		graceful = fs.Bool("graceful", false, "press the guest's ACPI power button and give it --timeout to power off before stopping it")
		timeout = fs.Duration("timeout", 30*time.Second, "with --graceful: how long the guest has to power off")
	}
	if done, err := parseFlags(fs, name, usage, args, stdout); done || err != nil {
		return exitOK, err
	}
	if timeout != nil && *timeout < 0 {
		return 0, usagef("stop: --timeout %s is negative", *timeout)
	}
	c, err := client(*sock, name)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch name {
	case "pause":
		err = c.Pause(ctx)
	case "resume":
		err = c.Resume(ctx)
	case "reset":
		err = c.Reset(ctx)
	case "reboot":
		_, err = c.SoftReboot(ctx)
	case "stop":
		if *graceful {
			err = gracefulStop(c, *timeout, stdout)
		} else {
			err = c.Stop(ctx)
		}
	case "status":
		var info api.Info
		if info, err = c.Info(ctx); err == nil {
			b, _ := json.MarshalIndent(info, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		}
	}
	if err != nil {
		return exitGuest, fmt.Errorf("%s: %w", name, err)
	}
	return exitOK, nil
}

// gracefulStop presses the guest's power button, waits up to timeout for
// the VM to end, then stops it.
func gracefulStop(c *api.Client, timeout time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	if err := c.PowerButton(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		info, err := c.Info(ctx)
		if vmmGone(err) || (err == nil && info.State == api.StateStopped) {
			fmt.Fprintln(stdout, "the guest powered off")
			return nil
		}
		if err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			break
		}
		// the API has no way to wait for the end: poll, as a user would
		time.Sleep(min(100*time.Millisecond, time.Until(deadline)))
	}
	fmt.Fprintf(stdout, "the guest did not power off within %s: stopping it\n", timeout)
	if err := c.Stop(ctx); err != nil && !vmmGone(err) {
		return err
	}
	return nil
}

// vmmGone says whether err means the VMM's control socket is no longer
// there: `vmm run` removes it and exits once its VM has ended.
func vmmGone(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

func cmdSnapshot(args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("vmm snapshot", flag.ContinueOnError)
	sock := clientFlags(fs)
	dir := fs.String("dir", "", "directory to write the snapshot into (required)")
	stop := fs.Bool("stop", false, "end the VM after the snapshot instead of resuming it")
	if done, err := parseFlags(fs, "snapshot", "--api SOCKET --dir DIR [--stop]", args, stdout); done || err != nil {
		return exitOK, err
	}
	c, err := client(*sock, "snapshot")
	if err != nil {
		return 0, err
	}
	if *dir == "" {
		return 0, usagef("snapshot: --dir is required")
	}
	abs, err := absPath(*dir)
	if err != nil {
		return 0, usagef("snapshot: --dir: %v", err)
	}
	ctx := context.Background()
	resume := !*stop
	res, err := c.Snapshot(ctx, api.SnapshotRequest{Dir: abs, Resume: &resume})
	if err != nil {
		return exitGuest, fmt.Errorf("snapshot: %w", err)
	}
	fmt.Fprintf(stdout, "snapshot written to %s: %.1f MiB of RAM stored, VM paused %.1f ms\n",
		res.Dir, float64(res.MemoryBytes)/(1<<20), res.PausedMs)
	if *stop {
		if err := c.Stop(ctx); err != nil {
			return exitGuest, fmt.Errorf("snapshot: stop after snapshot: %w", err)
		}
	}
	return exitOK, nil
}

// migrateRequest is the request `vmm migrate` sends, checked as it is
// built from the flags.
type migrateRequest api.MigrateRequest

// setLimits sets the bandwidth cap (bw as parseSize reads it, "" for
// none) and the pre-copy round limit, refusing what makes no sense.
func (r *migrateRequest) setLimits(bw string, maxRounds int) error {
	if maxRounds < 1 {
		return usagef("migrate: --max-rounds %d: want at least 1", maxRounds)
	}
	r.MaxRounds = maxRounds
	if bw != "" {
		b, err := parseSize(bw)
		if err != nil || b < 1<<20 {
			return usagef("migrate: --bandwidth %q: want at least 1M", bw)
		}
		r.BandwidthMBps = int64(b >> 20)
	}
	return nil
}

func cmdMigrate(args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("vmm migrate", flag.ContinueOnError)
	sock := clientFlags(fs)
	to := fs.String("to", "", "the target VMM's --incoming address: tcp:HOST:PORT or unix:PATH (required); tcp: without --tls-* is plaintext and unauthenticated")
	var tf tlsFlags
	tf.register(fs, "tls-server-name", "the name the target's certificate must carry (default: the --to host)")
	bw := fs.String("bandwidth", "", "bandwidth cap per second, e.g. 100M (default: none)")
	downtime := fs.Duration("downtime", 300*time.Millisecond, "longest acceptable pause for the final copy")
	autoConverge := fs.Bool("auto-converge", false, "throttle vCPUs when the guest dirties memory faster than it can be sent")
	postCopy := fs.Bool("post-copy", false, "when pre-copy does not converge (2 rounds; with --auto-converge, at full throttle), run the guest on the target at once and fetch the rest on demand; a failure after that loses the guest")
	progressTimeout := fs.Duration("progress-timeout", 150*time.Second, "give up when no progress is made for this long")
	timeout := fs.Duration("timeout", 0, "give up after this long in total (0: never)")
	maxRounds := fs.Int("max-rounds", 30, "pre-copy rounds after which the final copy is forced, however long the pause")
	cancelIt := fs.Bool("cancel", false, "cancel the migration in progress instead (the VM keeps running here); so does Ctrl-C while migrating")
	if done, err := parseFlags(fs, "migrate", "--api SOCKET --to ADDR [flags] | --api SOCKET --cancel", args, stdout); done || err != nil {
		return exitOK, err
	}
	c, err := client(*sock, "migrate")
	if err != nil {
		return 0, err
	}
	if *cancelIt {
		if *to != "" {
			return 0, usagef("migrate: --cancel takes no --to")
		}
		return cancelMigration(c, stdout)
	}
	if _, _, err := api.ParseAddress(*to); err != nil {
		return 0, usagef("migrate: --to: %v", err)
	}
	files, err := tf.files("migrate", *to)
	if err != nil {
		return 0, err
	}
	req := migrateRequest{To: *to, DowntimeMs: downtime.Milliseconds(), AutoConverge: *autoConverge, PostCopy: *postCopy,
		ProgressTimeout: int64(progressTimeout.Seconds()), Timeout: int64(timeout.Seconds()), TLS: files}
	if err := req.setLimits(*bw, *maxRounds); err != nil {
		return 0, err
	}
	// Interrupting the command cancels the migration, as with virsh: a
	// migration nobody watches is not left running. A signal that comes
	// while the migration is being started waits in sigs for it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx := context.Background()
	if err := c.Migrate(ctx, api.MigrateRequest(req)); err != nil {
		return exitGuest, fmt.Errorf("migrate: %w", err)
	}
	go func() {
		<-sigs
		// Too late to cancel (committed) is fine: WaitMigration reports
		// how it ended.
		_ = c.CancelMigration(ctx)
	}()
	tty := isTerminal(stdout)
	final, err := c.WaitMigration(ctx, 500*time.Millisecond, progressPrinter(stdout, tty, time.Now))
	if tty {
		fmt.Fprintln(stdout)
	}
	if err != nil {
		return exitGuest, fmt.Errorf("migrate: %w", err)
	}
	st := final.Stats
	if st.Phase != "completed" && st.PostCopy {
		// Not resumable: end the source VMM too (it exits with the error).
		if err := c.Stop(ctx); err != nil {
			return exitGuest, fmt.Errorf("migrate: %s (stopping the source: %v)", st.Error, err)
		}
		return exitGuest, fmt.Errorf("migrate: %s", st.Error)
	}
	if st.Phase != "completed" {
		return exitGuest, fmt.Errorf("migrate: failed, the VM keeps running here: %s", st.Error)
	}
	fmt.Fprintf(stdout, "migrate: completed in %v: %d rounds, %.1f MiB sent (%d data + %d zero pages), downtime %v\n",
		st.Total.Round(time.Millisecond), st.Rounds, mib(st.BytesSent), st.DataPages, st.ZeroPages, st.Downtime.Round(time.Microsecond))
	if st.PostCopy {
		fmt.Fprintf(stdout, "migrate: post-copy after round %d: %d pages fetched on the target's demand, the rest pushed\n", st.Rounds, st.RequestedPages)
	}
	// The source holds its (paused, now stale) VM until told to go.
	if err := c.Stop(ctx); err != nil {
		return exitGuest, fmt.Errorf("migrate: completed, but stopping the source VMM: %w", err)
	}
	return exitOK, nil
}

// cancelMigration cancels the VM's migration and waits until the VM is
// back to running here.
func cancelMigration(c *api.Client, stdout io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CancelMigration(ctx); err != nil {
		return exitGuest, fmt.Errorf("migrate: cancel: %w", err)
	}
	if _, err := c.WaitMigration(ctx, 100*time.Millisecond, nil); err != nil {
		return exitGuest, fmt.Errorf("migrate: cancel: %w", err)
	}
	fmt.Fprintln(stdout, "migrate: cancelled; the VM keeps running here")
	return exitOK, nil
}

// progressEvery spaces progress lines written to a log or a pipe.
const progressEvery = 5 * time.Second

// progressPrinter reports a migration's progress: on a terminal one line
// rewritten in place at every poll; elsewhere (a log, a pipe, where "\r"
// piles up into one endless line) a full line when the phase changes and
// every progressEvery in between.
func progressPrinter(w io.Writer, tty bool, now func() time.Time) func(api.MigrationStatus) {
	var last time.Time
	phase := ""
	return func(s api.MigrationStatus) {
		st := s.Stats
		line := fmt.Sprintf("migrate: %-13s round %d, %6.1f MiB sent, %6.1f MiB dirty, %6.1f MiB/s, throttle %3.0f%%",
			st.Phase, st.Rounds, mib(st.BytesSent), mib(st.Remaining), st.Bandwidth/(1<<20), st.Throttle*100)
		if tty {
			fmt.Fprint(w, "\r"+line)
			return
		}
		if t := now(); st.Phase != phase || t.Sub(last) >= progressEvery {
			fmt.Fprintln(w, line)
			last, phase = t, st.Phase
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + p, nil
}

// tlsFlags are the mutual-TLS flags of both ends of a migration.
type tlsFlags struct{ cert, key, ca, peer string }

func (f *tlsFlags) register(fs *flag.FlagSet, peerFlag, peerHelp string) {
	fs.StringVar(&f.cert, "tls-cert", "", "mutual TLS 1.3 on a tcp: stream: this end's certificate (PEM)")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&f.ca, "tls-ca", "", "the CA that signed the peer's certificate (PEM)")
	fs.StringVar(&f.peer, peerFlag, "", peerHelp)
}

// files checks the flags against the stream's address and makes the paths
// absolute (the VMM that reads them may run elsewhere); nil without TLS.
func (f *tlsFlags) files(cmd, addr string) (*migration.TLSFiles, error) {
	if f.cert == "" && f.key == "" && f.ca == "" {
		if f.peer != "" {
			return nil, usagef("%s: a peer name needs --tls-cert, --tls-key and --tls-ca", cmd)
		}
		return nil, nil
	}
	if f.cert == "" || f.key == "" || f.ca == "" {
		return nil, usagef("%s: mutual TLS needs all of --tls-cert, --tls-key and --tls-ca", cmd)
	}
	if network, _, err := api.ParseAddress(addr); err == nil && network != "tcp" {
		return nil, usagef("%s: --tls-* is for tcp: addresses; a unix socket stays local and plaintext", cmd)
	}
	files := &migration.TLSFiles{PeerName: f.peer}
	for _, p := range []struct {
		dst *string
		src string
	}{{&files.Cert, f.cert}, {&files.Key, f.key}, {&files.CA, f.ca}} {
		abs, err := absPath(p.src)
		if err != nil {
			return nil, usagef("%s: %v", cmd, err)
		}
		*p.dst = abs
	}
	return files, nil
}
