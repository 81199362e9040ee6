// Command kubevmm-multus is the Multus-compatible CNI meta-plugin
// (net/multus). Run by a container runtime (CNI_COMMAND set) it is the
// plugin; `kubevmm-multus install` is its node installer, the DaemonSet
// that puts the plugin and its configuration on each node and keeps the
// plugin's service account token current.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kubevmm/kubevmm/net/multus"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install" {
		if err := install(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "kubevmm-multus install:", err)
			os.Exit(1)
		}
		return
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: check}, multus.Versions, "kubevmm-multus: Multus-compatible meta-plugin")
}

// timeout bounds one CNI call: the runtime waits on it.
const timeout = 2 * time.Minute

func add(args *skel.CmdArgs) error {
	p, err := multus.NewPlugin(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := p.Add(ctx, args)
	if err != nil {
		return err
	}
	return types.PrintResult(r, p.Conf.CNIVersion)
}

func del(args *skel.CmdArgs) error {
	p, err := multus.NewPlugin(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Del(ctx, args)
}

func check(args *skel.CmdArgs) error {
	p, err := multus.NewPlugin(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Check(ctx, args)
}

func install(argv []string) error {
	var n multus.Node
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.StringVar(&n.BinDir, "bin-dir", multus.DefaultBinDir, "the node's CNI plugin directory")
	fs.StringVar(&n.ConfDir, "conf-dir", multus.DefaultConfDir, "the node's CNI configuration directory")
	fs.StringVar(&n.CNIDir, "cni-dir", multus.DefaultCNIDir, "the meta-plugin's cache of its delegates")
	fs.StringVar(&n.ClusterNetwork, "cluster-network", "", "the pod network's conf file in -conf-dir (required)")
	fs.StringVar(&n.StateDir, "state-dir", "", "where the plugin's kubeconfig, token and CA go (default -conf-dir/multus.d)")
	fs.StringVar(&n.TokenFile, "token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "the service account token")
	fs.StringVar(&n.CAFile, "ca-file", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "the cluster CA")
	every := fs.Duration("token-refresh", time.Minute, "how often the token copy is brought up to date")
	if err := fs.Parse(argv); err != nil {
		return err
	}
	if n.ClusterNetwork == "" {
		return fmt.Errorf("-cluster-network is required")
	}
	if n.StateDir == "" {
		n.StateDir = n.ConfDir + "/multus.d"
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT are not set: run in a pod")
	}
	n.Server = "https://" + host + ":" + port
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := multus.Install(n, self); err != nil {
		return err
	}
	slog.Info("installed", "plugin", n.BinDir+"/"+multus.PluginType, "conf", n.ConfDir+"/"+multus.ConfFile, "clusterNetwork", n.ClusterNetwork)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// The configuration stays: pods keep getting their networks
			// while the next installer starts.
			return nil
		case <-t.C:
			changed, err := multus.RefreshToken(n)
			if err != nil {
				slog.Error("token refresh", "err", err)
			} else if changed {
				slog.Info("token refreshed")
			}
		}
	}
}
