package launcher

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/console"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/migration"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

// receiveKubevmm is the target end of a live migration: it listens on
// addr, receives one migration stream (the source's VMM connects and sends
// the guest's configuration, memory and device state), and runs the guest
// it carries. The machine is built from the source's description: the
// same kernel-boot files, container-disk paths and tap names exist in this
// pod, which was made from the same VMI.
//
// One attempt only: a stream that fails leaves nothing running here, the
// source keeps its guest, and virt-controller deletes this pod. While it
// waits, the control API says Incoming (that is how virt-handler knows
// the target is ready).
func receiveKubevmm(ctx context.Context, addr string, cfg VMConfig, consolePath, vsockPath string, logSink *lineLog, sw *switchVM, log *slog.Logger, sandbox seccomp.Mode) (*kubevmmBackend, error) {
	l, err := api.ListenAddress(addr)
	if err != nil {
		return nil, fmt.Errorf("migration target: %w", err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// Accept does not take a context: closing the listener ends it.
		select {
		case <-ctx.Done():
			l.Close()
		case <-stop:
		}
	}()
	sw.setIncoming()
	log.Info("waiting for the migration", "address", l.Addr().String())
	conn, err := l.Accept()
	l.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("migration target: accepting on %s: %w", addr, err)
	}
	log.Info("migration stream", "from", conn.RemoteAddr().String())

	con := console.New(logSink)
	// The guest's vsock device is served on this pod's socket (the saved
	// path is the source's; in a pod both are the same path).
	in := machine.NewIncoming(machine.Config{Console: con, Logger: log.With("component", "vmm"),
		Reload: cfg.reload(), RebootResets: cfg.RebootResets, Vsock: &machine.VsockConfig{Socket: vsockPath}})
	st, err := migration.Receive(ctx, conn, in)
	if err != nil || !st.PostCopy {
		// In post-copy the guest runs here while its missing pages still
		// come over this stream: the migration closes it once they are
		// all in (or the source is lost).
		conn.Close()
	}
	if err != nil {
		con.Close()
		return nil, fmt.Errorf("receiving the migration from %s: %w", conn.RemoteAddr(), err)
	}
	log.Info("received the guest", "rounds", st.Rounds, "data_pages", st.DataPages, "zero_pages", st.ZeroPages, "post_copy_pages", st.MissingPages)
	return runKubevmm(in.Machine, con, consolePath, sandbox)
}
