// Package manager runs an operator command (cmd/*-operator) the way every
// kubevmm operator runs: the flags they share (health probes, leader
// election, logging, the image pull policy), the scheme, the
// controller-runtime manager, its health checks and the signal handling.
// Each command says only what differs: its own flags, its API types and
// its reconcilers.
package manager

import (
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Flags are the flags every operator takes.
type Flags struct {
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr   string
	LeaderElect bool
	// LeaseNamespace holds the leader election lease:
	// --leader-election-namespace where Bind registered it, else the
	// command sets it (its own namespace).
	LeaseNamespace string
	// PullPolicy is --image-pull-policy, checked, where BindPullPolicy
	// registered it.
	PullPolicy corev1.PullPolicy

	leaseFlag bool
	pull      *string
	zap       zap.Options
}

// Bind registers the shared flags on fs; with leaseFlag also
// --leader-election-namespace (default $POD_NAMESPACE).
func (f *Flags) Bind(fs *flag.FlagSet, leaseFlag bool) {
	fs.StringVar(&f.ProbeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.BoolVar(&f.LeaderElect, "leader-elect", false, "run as one of several replicas, only the elected one reconciling")
	if f.leaseFlag = leaseFlag; leaseFlag {
		fs.StringVar(&f.LeaseNamespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease (default: $POD_NAMESPACE)")
	}
	f.zap.BindFlags(fs)
}

// BindPullPolicy registers --image-pull-policy (default IfNotPresent) on
// fs, with usage saying what it applies to.
func (f *Flags) BindPullPolicy(fs *flag.FlagSet, usage string) {
	f.pull = fs.String("image-pull-policy", string(corev1.PullIfNotPresent), usage)
}

// Parse parses args with fs, sets up the logger and checks the shared
// flags: the pull policy is one Kubernetes knows, and leader election
// knows its lease's namespace.
func (f *Flags) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	if f.pull != nil {
		f.PullPolicy = corev1.PullPolicy(*f.pull)
		switch f.PullPolicy {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		default:
			return fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", *f.pull)
		}
	}
	if f.leaseFlag && f.LeaderElect && f.LeaseNamespace == "" {
		return fmt.Errorf("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE)")
	}
	return nil
}

// Operator is what differs between the operators' managers.
type Operator struct {
	// Name is the command's, in its "starting" log line.
	Name             string
	LeaderElectionID string
	// AddToScheme registers the API types beyond api/scheme's.
	AddToScheme []func(*runtime.Scheme) error
	// Options are the manager's options beyond the shared ones (a
	// webhook server, metrics: off unless set here).
	Options ctrl.Options
	// OwnNamespace is the namespace of the components it deploys, where
	// its Role grants it ServiceAccounts, Services, ConfigMaps and
	// Secrets: it caches those kinds from there only
	// (kit.OwnNamespaceCache).
	OwnNamespace string
	// Setup adds the reconcilers to the manager and returns the readiness
	// check, nil for a ping.
	Setup func(ctrl.Manager) (healthz.Checker, error)
	// Log are the key-value pairs of the "starting" log line.
	Log []any
}

// Run runs op's manager until a signal ends it.
func (f *Flags) Run(op Operator) error {
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	for _, add := range op.AddToScheme {
		if err := add(scheme); err != nil {
			return fmt.Errorf("registering the API types: %w", err)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	opts := op.Options
	opts.Scheme, opts.HealthProbeBindAddress = scheme, f.ProbeAddr
	opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = f.LeaderElect, op.LeaderElectionID, f.LeaseNamespace
	if op.OwnNamespace != "" {
		opts.Cache = kit.OwnNamespaceCache(op.OwnNamespace)
	}
	if opts.Metrics.BindAddress == "" {
		opts.Metrics.BindAddress = "0"
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	ready, err := op.Setup(mgr)
	if err != nil {
		return err
	}
	if ready == nil {
		ready = healthz.Ping
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting "+op.Name, op.Log...)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
