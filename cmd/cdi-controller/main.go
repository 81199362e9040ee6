// Command cdi-controller runs CDI's controllers: DataVolumes
// (storage/cdi/datavolume), imports (storage/cdi/importcontroller),
// uploads (storage/cdi/upload), clones (storage/cdi/clonecontroller) and
// DataSources (storage/cdi/datasource).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/storage/cdi/clonecontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/dataimportcron"
	"github.com/kubevmm/kubevmm/storage/cdi/datasource"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
	"github.com/kubevmm/kubevmm/storage/cdi/importcontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/upload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	var image, pull, probeAddr, namespace string
	var leaderElect bool
	var tokenDir string
	flag.StringVar(&tokenDir, "token-dir", "/etc/cdi-controller/token", "the token key pair ("+token.PrivateKeyKey+", "+token.PublicKeyKey+"): clone tokens checked and extended")
	flag.StringVar(&image, "importer-image", "localhost/kubevmm/cdi-importer:devel", "the importer pods' image")
	var uploadImage, clonerImage string
	flag.StringVar(&uploadImage, "uploadserver-image", "localhost/kubevmm/cdi-uploadserver:devel", "the upload server pods' image")
	flag.StringVar(&clonerImage, "cloner-image", "localhost/kubevmm/cdi-cloner:devel", "the clone source pods' image")
	flag.StringVar(&pull, "pull-policy", string(corev1.PullIfNotPresent), "the importer pods' pull policy (Always, IfNotPresent, Never)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.StringVar(&namespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election lease (default: $POD_NAMESPACE)")
	flag.BoolVar(&leaderElect, "leader-elect", false, "run as one of several replicas, only the elected one reconciling")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	switch corev1.PullPolicy(pull) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--pull-policy %q: want Always, IfNotPresent or Never", pull)
	}
	if leaderElect && namespace == "" {
		return fmt.Errorf("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE)")
	}
	signer, verifier, err := token.LoadPair(tokenDir)
	if err != nil {
		return err
	}
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	if err := cdiv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering %s: %w", cdiv1.GroupVersion, err)
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
		LeaderElectionID:        "cdi-controller." + cdiv1.GroupName,
		LeaderElectionNamespace: namespace,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := (&datavolume.Reconciler{Client: mgr.GetClient(), Signer: signer, Tokens: verifier}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the DataVolume controller: %w", err)
	}
	if err := (&importcontroller.Reconciler{Client: mgr.GetClient(), Image: image, PullPolicy: corev1.PullPolicy(pull)}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the import controller: %w", err)
	}
	if err := (&upload.Reconciler{Client: mgr.GetClient(), Namespace: os.Getenv("POD_NAMESPACE"), Image: uploadImage, PullPolicy: corev1.PullPolicy(pull),
		Log: slog.Default().With("controller", "cdi-upload")}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the upload controller: %w", err)
	}
	if err := (&clonecontroller.Reconciler{Client: mgr.GetClient(), Namespace: os.Getenv("POD_NAMESPACE"), Image: clonerImage, PullPolicy: corev1.PullPolicy(pull),
		Recorder: mgr.GetEventRecorder("cdi-clone"), Log: slog.Default().With("controller", "cdi-clone"), Tokens: verifier}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the clone controller: %w", err)
	}
	if err := (&datasource.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the DataSource controller: %w", err)
	}
	if err := (&dataimportcron.Reconciler{Client: mgr.GetClient(), Digest: dataimportcron.RegistryDigest(mgr.GetAPIReader()),
		Log: slog.Default().With("controller", "dataimportcron")}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the DataImportCron controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting cdi-controller", "importer", image)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
