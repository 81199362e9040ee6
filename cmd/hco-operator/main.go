// Command hco-operator is the HyperConverged operator (operator/hco): it
// reconciles the HyperConverged CR into the operand CRs and, with
// --webhook, serves the hco-webhook (validation of the CR and its
// v1/v1beta1 conversion) in the same process, with a serving certificate
// it makes and rotates itself (hco.WebhookCerts). With
// --serve-cli-downloads DIR it is instead the cli-download server: the
// files under DIR (amd64/linux/virtctl.tar.gz) over plain HTTP.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/operator/hco"
	hcoinstall "github.com/kubevmm/kubevmm/operator/hco/install"
	"github.com/kubevmm/kubevmm/operator/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hco-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	namespace := os.Getenv("POD_NAMESPACE")
	var version, metricsAddr, downloads, listen string
	var port int
	var serveWebhook bool
	var settle time.Duration
	var f manager.Flags
	flag.StringVar(&namespace, "namespace", namespace, "namespace of the HyperConverged CR and its namespaced operands (default: $POD_NAMESPACE)")
	flag.StringVar(&version, "version", "devel", "the operator's version, reported in the CR's status.versions")
	flag.BoolVar(&serveWebhook, "webhook", false, "serve the hco-webhook (validation, conversion) with a certificate the operator makes, rotates by the CR's certConfig and publishes as the caBundle of "+
		hcoinstall.WebhookConfig+" and of the CRD's conversion webhook (Secrets "+hcoinstall.WebhookSecret+", "+hcoinstall.WebhookCASecret+")")
	flag.DurationVar(&settle, "secret-propagation", certs.DefaultSettle, "how long a new CA of the webhook's is published before a valid certificate is replaced by one it signs")
	flag.IntVar(&port, "webhook-port", 4343, "port of the hco-webhook")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of /metrics (kubevirt_hco_out_of_band_modifications_total; HTTPS, to a token allowed to GET /metrics); 0 disables")
	flag.StringVar(&downloads, "serve-cli-downloads", "", "be the cli-download server instead: serve the files under this directory")
	flag.StringVar(&listen, "listen", ":8080", "address of the cli-download server")
	f.Bind(flag.CommandLine, false)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}

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
	f.LeaseNamespace = namespace
	// HTTPS to a token allowed to GET /metrics, as every component's.
	opts := ctrl.Options{Metrics: securemetrics.Options(metricsAddr)}
	var wc *hco.WebhookCerts
	if serveWebhook {
		wc = &hco.WebhookCerts{Namespace: namespace, Service: hcoinstall.WebhookService, Secret: hcoinstall.WebhookSecret, CASecret: hcoinstall.WebhookCASecret,
			WebhookConfig: hcoinstall.WebhookConfig, CRD: hcoinstall.CRDName, Settle: settle, Poll: 30 * time.Second}
		opts.WebhookServer = webhook.NewServer(webhook.Options{Port: port, TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.GetCertificate = wc.GetCertificate
			// Reviews come with the API server's certificate, checked
			// by route (hco.RegisterWebhooks).
			c.ClientAuth = tls.RequestClientCert
		}}})
	}
	return f.Run(manager.Operator{
		Name:             "hco-operator",
		LeaderElectionID: "hyperconverged-cluster-operator.hco.kubevirt.io",
		AddToScheme:      []func(*runtime.Scheme) error{hcov1.AddToScheme},
		Options:          opts,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &hco.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: namespace, Version: version}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the HyperConverged reconciler: %w", err)
			}
			if wc == nil {
				return nil, nil
			}
			return addWebhook(mgr, wc, namespace)
		},
		Log: []any{"namespace", namespace, "version", version, "webhook", serveWebhook},
	})
}

// addWebhook adds the hco-webhook's handlers and the making of its
// certificate to mgr; the readiness check is the webhook's.
func addWebhook(mgr ctrl.Manager, wc *hco.WebhookCerts, namespace string) (healthz.Checker, error) {
	wc.Client, wc.Reader = mgr.GetClient(), mgr.GetAPIReader()
	if err := mgr.Add(wc); err != nil {
		return nil, fmt.Errorf("adding the webhook's certificates: %w", err)
	}
	// Who the API server is: only its reviews are answered.
	callers, err := frontproxy.NewWatcher(context.Background(), mgr.GetAPIReader())
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(ctrlmanager.RunnableFunc(func(ctx context.Context) error {
		callers.Run(ctx, func(err error) {
			ctrl.Log.Error(err, "re-reading the front-proxy settings (the ones read before stay)")
		})
		return nil
	})); err != nil {
		return nil, err
	}
	ws := mgr.GetWebhookServer()
	hco.RegisterWebhooks(ws, mgr.GetAPIReader(), namespace, callers)
	return ws.StartedChecker(), nil
}
