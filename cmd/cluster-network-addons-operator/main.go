// Command cluster-network-addons-operator reconciles the NetworkAddonsConfig
// (networkaddonsoperator.network.kubevirt.io) named "cluster" into the
// network add-ons its spec asks for (operator/network).
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/kubevmm/kubevmm/api/certs"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/manager"
	"github.com/kubevmm/kubevmm/operator/network"
	netinstall "github.com/kubevmm/kubevmm/operator/network/install"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-network-addons-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o network.Options
	var f manager.Flags
	var registry string
	flag.StringVar(&registry, "image-registry", "localhost/kubevmm", "the components' image repository prefix")
	flag.StringVar(&o.Version, "image-tag", "devel", "the components' image tag (and the version the NetworkAddonsConfig reports)")
	flag.StringVar(&o.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "the container runtime's CNI plugin directory on the nodes")
	flag.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "the container runtime's CNI configuration directory on the nodes")
	flag.StringVar(&o.ClusterNetwork, "cluster-network", "10-bridge.conflist", "the pod network's conf file in --cni-conf-dir, which kubevmm-multus delegates to")
	flag.DurationVar(&o.CertSettle, "secret-propagation", certs.DefaultSettle, "how long a new CA of kubemacpool's is published before a valid certificate is replaced by one it signs (the kubelet's sync period and cache)")
	f.BindPullPolicy(flag.CommandLine, "the components' pull policy when spec.imagePullPolicy is unset (Always, IfNotPresent, Never)")
	f.Bind(flag.CommandLine, true)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o.PullPolicy = f.PullPolicy
	o.MultusImage = registry + "/kubevmm-multus:" + o.Version
	o.BridgeMarkerImage = registry + "/bridge-marker:" + o.Version
	o.KubeMacPoolImage = registry + "/kubemacpool:" + o.Version
	return f.Run(manager.Operator{
		Name:             "cluster-network-addons-operator",
		LeaderElectionID: "cluster-network-addons-operator." + networkaddonsv1.GroupName,
		AddToScheme:      []func(*runtime.Scheme) error{networkaddonsv1.AddToScheme},
		OwnNamespace:     netinstall.Namespace,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &network.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the NetworkAddonsConfig reconciler: %w", err)
			}
			return nil, nil
		},
		Log: []any{"registry", registry, "tag", o.Version},
	})
}
