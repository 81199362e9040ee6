// Command virt-operator installs kubevmm from the KubeVirt CR
// (kubevirt.io/v1): it reconciles the CR into the CRDs, RBAC, virt-api,
// virt-controller, virt-handler, webhooks and APIService (operator/virt),
// in its own namespace.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/operator/virt"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	o := virt.Options{Namespace: os.Getenv("POD_NAMESPACE")}
	var pull, probeAddr string
	var leaderElect bool
	flag.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the components (default: $POD_NAMESPACE, the operator's own)")
	flag.StringVar(&o.ImageRegistry, "image-registry", "localhost/kubevmm", "images' repository prefix when the KubeVirt CR sets no imageRegistry")
	flag.StringVar(&o.ImageTag, "image-tag", "devel", "images' tag when the KubeVirt CR sets no imageTag")
	flag.StringVar(&pull, "image-pull-policy", string(corev1.PullIfNotPresent), "pull policy when the KubeVirt CR sets none (Always, IfNotPresent, Never)")
	flag.StringVar(&o.PluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory on the nodes")
	flag.StringVar(&o.KubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir on the nodes")
	// The kubelet's default sync period is a minute, plus its cache's TTL.
	flag.DurationVar(&o.SecretPropagation, "secret-propagation", 2*time.Minute, "how long the kubelet may take to update a mounted Secret: a new CA signs leaves only once published that long")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
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
	if o.Namespace == "" {
		return fmt.Errorf("--namespace (or $POD_NAMESPACE) is required")
	}
	scheme, err := kvscheme.New()
	if err != nil {
		return err
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
		LeaderElectionID:        "virt-operator.kubevirt.io",
		LeaderElectionNamespace: o.Namespace,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &virt.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KubeVirt reconciler: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting virt-operator", "namespace", o.Namespace, "registry", o.ImageRegistry, "tag", o.ImageTag)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
