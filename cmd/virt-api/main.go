// Command virt-api serves kubevmm's admission webhooks and the
// subresources.kubevirt.io aggregated API (see package virtapi).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kubevmm/kubevmm/api/clusterconfig"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/virtapi"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-api:", err)
		os.Exit(1)
	}
}

func run() error {
	var addr, certDir, handlerCertDir, namespace, configPath string
	flag.StringVar(&addr, "listen", ":8443", "HTTPS address")
	flag.StringVar(&certDir, "cert-dir", "/etc/virt-api/certs", "tls.crt and tls.key of the serving certificate")
	flag.StringVar(&handlerCertDir, "handler-cert-dir", "/etc/virt-api/handler-client", "tls.crt, tls.key and ca.crt for talking to virt-handler")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the kubevmm components")
	flag.StringVar(&configPath, "config", "", "cluster configuration (the ConfigMap kubevmm-config virt-operator renders: KubeVirt's developerConfiguration.featureGates), re-read when it changes; empty: no feature gate")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("virt-api")
	if namespace == "" {
		namespace = "kubevirt"
	}

	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The front proxy's CA and names, as the API server publishes them
	// for extension API servers.
	fp, err := frontproxy.Watch(ctx, c, func(err error) { log.Error(err, "re-reading the front-proxy settings (the ones read before stay)") })
	if err != nil {
		return err
	}
	handlerTLS, err := virtapi.HandlerClientTLS(handlerCertDir+"/tls.crt", handlerCertDir+"/tls.key", handlerCertDir+"/ca.crt", "kubevirt.io:system:node:virt-handler")
	if err != nil {
		return err
	}
	// virt-api's ServiceAccount holds system:auth-delegator already (its
	// aggregated API's reviews).
	guard, err := securemetrics.Guard(cfg, log)
	if err != nil {
		return err
	}
	s := &virtapi.Server{
		Client: c, Namespace: namespace, HandlerTLS: handlerTLS,
		Proxy: fp, Callers: fp, MetricsGuard: guard, Log: log,
	}
	if configPath != "" {
		f := &clusterconfig.ConfigFile{Path: configPath}
		s.Config = f.Get
	}
	srv := &http.Server{
		Addr: addr, Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Webhook reviews and proxied subresource calls come with
			// the front proxy's certificate, checked per route; probes
			// and scrapes without one.
			ClientAuth: tls.RequestClientCert,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				// Reloaded per handshake: a rotated secret takes effect
				// without a restart.
				c, err := tls.LoadX509KeyPair(certDir+"/tls.crt", certDir+"/tls.key")
				return &c, err
			},
		},
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Past the grace time open requests are cut: nothing to save.
		_ = srv.Shutdown(sctx)
	}()
	log.Info("starting virt-api", "addr", addr)
	if err := srv.ListenAndServeTLS("", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
