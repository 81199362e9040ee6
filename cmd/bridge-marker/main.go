// Command bridge-marker publishes its node's Linux bridges as node
// resources bridge.network.kubevirt.io/<bridge> (net/bridgemarker). It
// runs in the host's network namespace (a hostNetwork DaemonSet pod).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubevmm/kubevmm/net/bridgemarker"
)

func main() {
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
