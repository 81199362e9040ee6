// Command ssp-operator reconciles the SSP CR (ssp.kubevirt.io/v1beta3)
// into the Template CRD, the common instance types and preferences, the
// common templates and virt-template-validator (operator/ssp), and
// answers TektonTasks CRs as a deprecated no-op.
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

	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
	"github.com/kubevmm/kubevmm/operator/certs"
	"github.com/kubevmm/kubevmm/operator/ssp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ssp-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o ssp.Options
	var pull, probeAddr, namespace string
	var leaderElect bool
	flag.StringVar(&o.ImageRegistry, "image-registry", "localhost/kubevmm", "virt-template-validator's image repository prefix")
	flag.StringVar(&o.ImageTag, "image-tag", "devel", "virt-template-validator's image tag (and the version the SSP reports)")
	flag.StringVar(&pull, "image-pull-policy", string(corev1.PullIfNotPresent), "virt-template-validator's pull policy (Always, IfNotPresent, Never)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.StringVar(&namespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease (default: $POD_NAMESPACE)")
	flag.DurationVar(&o.CertSettle, "secret-propagation", certs.DefaultSettle, "how long a new CA of the validator's is published before a valid certificate is replaced by one it signs (the kubelet's sync period and cache)")
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
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	if err := sspv1beta3.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering ssp.kubevirt.io/v1beta3: %w", err)
	}
	if err := tektonv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering tektontasks.kubevirt.io/v1alpha1: %w", err)
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
		LeaderElectionID:        "ssp-operator.ssp.kubevirt.io",
		LeaderElectionNamespace: namespace,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &ssp.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SSP reconciler: %w", err)
	}
	if err := (&ssp.TektonTasksReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TektonTasks reconciler: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting ssp-operator", "registry", o.ImageRegistry, "tag", o.ImageTag)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
