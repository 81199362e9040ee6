// Command bridge-marker publishes its node's Linux bridges as node
// resources bridge.network.kubevirt.io/<bridge> (net/bridgemarker). It
// runs in the host's network namespace (a hostNetwork DaemonSet pod).
//
// `bridge-marker install-plugins --bin-dir DIR` (its DaemonSet's init
// container) installs the CNI plugins a linux-bridge network needs,
// bridge and tuning, from its image (PluginDir) into the node's CNI bin
// directory, each replaced whole.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubevmm/kubevmm/net/bridgemarker"
	"github.com/kubevmm/kubevmm/net/multus"
)

// PluginDir is where the image carries the CNI plugins.
const PluginDir = "/usr/lib/cni"

// Plugins are the CNI plugins linuxBridge installs.
var Plugins = []string{"bridge", "tuning"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install-plugins" {
		if err := installPlugins(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bridge-marker install-plugins:", err)
			os.Exit(1)
		}
		return
	}
	m := bridgemarker.Marker{}
	flag.StringVar(&m.Node, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	flag.DurationVar(&m.Interval, "interval", time.Minute, "resync period besides link changes")
	flag.Parse()
	if err := run(&m); err != nil {
		fmt.Fprintln(os.Stderr, "bridge-marker:", err)
		os.Exit(1)
	}
}

func run(m *bridgemarker.Marker) error {
	if m.Node == "" {
		return fmt.Errorf("no node name: set -node-name or NODE_NAME")
	}
	if m.Interval <= 0 {
		return fmt.Errorf("-interval %s: must be positive", m.Interval)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	if m.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return m.Run(ctx)
}

// installPlugins copies Plugins from --from (default PluginDir) into
// --bin-dir.
func installPlugins(args []string) error {
	fs := flag.NewFlagSet("install-plugins", flag.ContinueOnError)
	from := fs.String("from", PluginDir, "directory of the plugins to install")
	binDir := fs.String("bin-dir", "", "the node's CNI bin directory (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binDir == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: bridge-marker install-plugins --bin-dir DIR [--from DIR]")
	}
	for _, p := range Plugins {
		if err := multus.InstallFile(filepath.Join(*from, p), filepath.Join(*binDir, p), 0o755); err != nil {
			return fmt.Errorf("installing the %s plugin: %w", p, err)
		}
		fmt.Printf("installed %s\n", filepath.Join(*binDir, p))
	}
	return nil
}
