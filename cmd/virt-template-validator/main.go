// Command virt-template-validator is SSP's admission webhook for the
// validation rules of templates (see package templatevalidator/webhook
// for the paths it serves and the access it needs).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/frontproxy"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/templatevalidator/webhook"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-template-validator:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", 8443, "HTTPS port")
	certDir := flag.String("cert-dir", "/etc/webhook/certs", "directory of the serving certificate (tls.crt, tls.key), read at each TLS handshake")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *port < 1 || *port > 65535 {
		return fmt.Errorf("--port %d: not a TCP port", *port)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	scheme, err := kvscheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the API configuration: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Who the API server is: only its reviews are answered.
	callers, err := frontproxy.Watch(ctx, c, func(err error) {
		log.Error("re-reading the front-proxy settings (the ones read before stay)", "err", err)
	})
	if err != nil {
		return err
	}
	guard, err := securemetrics.Guard(cfg, logr.FromSlogHandler(log.Handler()))
	if err != nil {
		return err
	}
	s := &webhook.Server{Client: c, CertDir: *certDir, Callers: callers, MetricsGuard: guard, Log: log}
	return s.ListenAndServe(ctx, ":"+strconv.Itoa(*port))
}
