package handler

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// SocketGC removes socket directories no VMI on this node owns: those of
// VMIs that went away while virt-handler was not running, or whose
// removal the VMI loop did not see (the VMI was gone before its pod).
type SocketGC struct {
	Client     client.Client // the manager's cache: this node's VMIs
	SocketRoot string
	Log        logr.Logger
	// MinAge protects a directory the kubelet just created for a VMI the
	// cache has not seen yet.
	MinAge   time.Duration
	Interval time.Duration
}

// Run collects at start and then every Interval until ctx ends.
func (g *SocketGC) Run(ctx context.Context) error {
	for {
		g.collect(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(g.Interval):
		}
	}
}

func (g *SocketGC) collect(ctx context.Context) {
	vmis := &v1.VirtualMachineInstanceList{}
	if err := g.Client.List(ctx, vmis); err != nil {
		g.Log.Error(err, "socket GC: listing VMIs")
		return
	}
	owned := map[string]bool{}
	for _, vmi := range vmis.Items {
		owned[string(vmi.UID)] = true
	}
	ents, err := os.ReadDir(g.SocketRoot)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || owned[e.Name()] {
			continue
		}
		dir := filepath.Join(g.SocketRoot, e.Name())
		st, err := os.Stat(dir)
		if err != nil || time.Since(st.ModTime()) < g.MinAge {
			continue
		}
		// A launcher still answering is alive, whatever the cache says.
		if _, live, _ := (launcherConn{dir: dir}).info(ctx); live {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			g.Log.Info("socket GC: removed the directory of a VMI that is gone", "dir", dir)
		}
	}
}
