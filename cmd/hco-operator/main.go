// Command hco-operator is the HyperConverged operator (operator/hco): it
// reconciles the HyperConverged CR into the operand CRs and, with
// --webhook, serves the hco-webhook (validation of the CR and its
// v1/v1beta1 conversion) in the same process, with a serving certificate
// it makes and rotates itself (hco.WebhookCerts). With
// --serve-cli-downloads DIR it is instead the cli-download server: the
// files under DIR (amd64/linux/virtctl.tar.gz) over plain HTTP.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/operator/certs"
	"github.com/kubevmm/kubevmm/operator/hco"
	hcoinstall "github.com/kubevmm/kubevmm/operator/hco/install"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hco-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	namespace := os.Getenv("POD_NAMESPACE")
	var version, metricsAddr, probeAddr, downloads, listen string
	var port int
	var leaderElect, serveWebhook bool
	var settle time.Duration
	flag.StringVar(&namespace, "namespace", namespace, "namespace of the HyperConverged CR and its namespaced operands (default: $POD_NAMESPACE)")
	flag.StringVar(&version, "version", "devel", "the operator's version, reported in the CR's status.versions")
	flag.BoolVar(&serveWebhook, "webhook", false, "serve the hco-webhook (validation, conversion) with a certificate the operator makes, rotates by the CR's certConfig and publishes as the caBundle of "+
		hcoinstall.WebhookConfig+" and of the CRD's conversion webhook (Secrets "+hcoinstall.WebhookSecret+", "+hcoinstall.WebhookCASecret+")")
	flag.DurationVar(&settle, "secret-propagation", certs.DefaultSettle, "how long a new CA of the webhook's is published before a valid certificate is replaced by one it signs")
	flag.IntVar(&port, "webhook-port", 4343, "port of the hco-webhook")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of /metrics (kubevirt_hco_out_of_band_modifications_total); 0 disables")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&leaderElect, "leader-elect", false, "run as one of several replicas, only the elected one reconciling")
	flag.StringVar(&downloads, "serve-cli-downloads", "", "be the cli-download server instead: serve the files under this directory")
	flag.StringVar(&listen, "listen", ":8080", "address of the cli-download server")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if downloads != "" {
		if _, err := os.Stat(downloads); err != nil {
			return fmt.Errorf("--serve-cli-downloads: %w", err)
		}
		srv := &http.Server{Addr: listen, Handler: http.FileServer(http.Dir(downloads)), ReadHeaderTimeout: 10 * time.Second}
		ctrl.Log.Info("serving cli downloads", "dir", downloads, "address", listen)
		return srv.ListenAndServe()
	}
	if namespace == "" {
		return errors.New("--namespace (or $POD_NAMESPACE) is required")
	}
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	if err := hcov1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering hco.kubevirt.io/v1: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "hyperconverged-cluster-operator.hco.kubevirt.io",
		LeaderElectionNamespace: namespace,
	}
	var wc *hco.WebhookCerts
	if serveWebhook {
		wc = &hco.WebhookCerts{Namespace: namespace, Service: hcoinstall.WebhookService, Secret: hcoinstall.WebhookSecret, CASecret: hcoinstall.WebhookCASecret,
			WebhookConfig: hcoinstall.WebhookConfig, CRD: hcoinstall.CRDName, Settle: settle, Poll: 30 * time.Second}
		opts.WebhookServer = webhook.NewServer(webhook.Options{Port: port, TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = wc.GetCertificate }}})
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	r := &hco.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: namespace, Version: version}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the HyperConverged reconciler: %w", err)
	}
	ready := healthz.Ping
	if wc != nil {
		if ready, err = addWebhook(mgr, wc, namespace); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", ready); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	ctrl.Log.Info("starting hco-operator", "namespace", namespace, "version", version, "webhook", serveWebhook)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// addWebhook adds the hco-webhook's handlers and the making of its
// certificate to mgr; the readiness check is the webhook's.
func addWebhook(mgr ctrl.Manager, wc *hco.WebhookCerts, namespace string) (healthz.Checker, error) {
	wc.Client, wc.Reader = mgr.GetClient(), mgr.GetAPIReader()
	if err := mgr.Add(wc); err != nil {
		return nil, fmt.Errorf("adding the webhook's certificates: %w", err)
	}
	ws := mgr.GetWebhookServer()
	ws.Register(hco.ValidatePath, &admission.Webhook{Handler: &hco.Validator{Reader: mgr.GetAPIReader(), Namespace: namespace}})
	ws.Register(hco.ConvertPath, hco.ConversionHandler())
	return ws.StartedChecker(), nil
}
