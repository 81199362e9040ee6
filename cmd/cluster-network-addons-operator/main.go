// Command cluster-network-addons-operator reconciles the NetworkAddonsConfig
// (networkaddonsoperator.network.kubevirt.io) named "cluster" into the
// network add-ons its spec asks for (operator/network).
package main

import (
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/operator/network"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster-network-addons-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o network.Options
	var registry, pull, probeAddr, namespace string
	var leaderElect bool
	flag.StringVar(&registry, "image-registry", "localhost/kubevmm", "the components' image repository prefix")
	flag.StringVar(&o.Version, "image-tag", "devel", "the components' image tag (and the version the NetworkAddonsConfig reports)")
	flag.StringVar(&pull, "image-pull-policy", string(corev1.PullIfNotPresent), "the components' pull policy when spec.imagePullPolicy is unset (Always, IfNotPresent, Never)")
	flag.StringVar(&o.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "the container runtime's CNI plugin directory on the nodes")
	flag.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "the container runtime's CNI configuration directory on the nodes")
	flag.StringVar(&o.ClusterNetwork, "cluster-network", "10-bridge.conflist", "the pod network's conf file in --cni-conf-dir, which kubevmm-multus delegates to")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.StringVar(&namespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease (default: $POD_NAMESPACE)")
	flag.BoolVar(&leaderElect, "leader-elect", false, "run as one of several replicas, only the elected one reconciling")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	o.PullPolicy = corev1.PullPolicy(pull)
	switch o.PullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", pull)
	}
	if leaderElect && namespace == "" {
		return fmt.Errorf("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE)")
	}
	o.MultusImage = registry + "/kubevmm-multus:" + o.Version
	o.BridgeMarkerImage = registry + "/bridge-marker:" + o.Version
	o.KubeMacPoolImage = registry + "/kubemacpool:" + o.Version
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	if err := networkaddonsv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering %s: %w", networkaddonsv1.GroupVersion, err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "cluster-network-addons-operator." + networkaddonsv1.GroupName,
		LeaderElectionNamespace: namespace,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &network.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the NetworkAddonsConfig reconciler: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting cluster-network-addons-operator", "registry", registry, "tag", o.Version)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
