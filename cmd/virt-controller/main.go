// Command virt-controller runs the cluster-wide kubevirt.io reconcilers
// (VirtualMachine -> VirtualMachineInstance -> virt-launcher pod, and live
// migrations) as one controller-runtime manager.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/controller/metrics"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		launcherImage string
		pullPolicy    string
		leaderElect   bool
		leaderElectNS string
		metricsAddr   string
		probeAddr     string
		configPath    string
	)
	flag.StringVar(&launcherImage, "launcher-image", "localhost/kubevmm/virt-launcher:devel", "image of the virt-launcher pods")
	flag.StringVar(&pullPolicy, "launcher-image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of the virt-launcher image (Always, IfNotPresent, Never)")
	flag.BoolVar(&leaderElect, "leader-elect", false, "run as one of several replicas, only the elected one reconciling")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader election lease (default: the pod's)")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus /metrics endpoint (HTTPS, a bearer token allowed to GET /metrics); 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.StringVar(&configPath, "config", "", "cluster configuration (YAML/JSON: KubeVirt's spec.configuration migrations and developerConfiguration.featureGates), re-read when it changes; empty: KubeVirt's defaults")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	switch corev1.PullPolicy(pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--launcher-image-pull-policy %q: want Always, IfNotPresent or Never", pullPolicy)
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
		Metrics:                 securemetrics.Options(metricsAddr),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "virt-controller.kubevirt.io",
		LeaderElectionNamespace: leaderElectNS,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	opts := controller.Options{Launcher: controller.LauncherConfig{
		Image: launcherImage, ImagePullPolicy: corev1.PullPolicy(pullPolicy),
	}}
	if configPath != "" {
		f := &controller.ConfigFile{Path: configPath}
		// A bad file at start is a deployment error: refuse to run. Later
		// changes that do not parse keep the last good configuration.
		c, err := f.Get()
		if err != nil {
			return err
		}
		ctrl.Log.Info("cluster configuration", "file", configPath, "featureGates", c.DeveloperConfiguration.FeatureGates, "migrations", c.Limits())
		opts.Config = f.Get
	}
	if err := controller.Setup(mgr, opts); err != nil {
		return err
	}
	if err := addMetrics(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting virt-controller", "launcherImage", launcherImage)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// addMetrics registers KubeVirt's virt-controller metrics with the
// manager's metrics server: ready once the cache has synced (the replica
// could take the lead), leading once elected (at once without election).
func addMetrics(mgr ctrl.Manager) error {
	var ready, leading atomic.Bool
	err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			ready.Store(true)
		}
		return nil
	}))
	if err != nil {
		return fmt.Errorf("adding the readiness metric: %w", err)
	}
	go func() {
		<-mgr.Elected()
		leading.Store(true)
	}()
	c := &metrics.Collector{Reader: mgr.GetCache(), Ready: ready.Load, Leading: leading.Load}
	if err := ctrlmetrics.Registry.Register(c); err != nil {
		return fmt.Errorf("registering the metrics: %w", err)
	}
	return nil
}

// everyReplica is a runnable that runs on every replica, not only the
// elected one (a plain manager.RunnableFunc waits for the election).
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }
