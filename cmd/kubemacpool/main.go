// Command kubemacpool is the MAC address pool's webhook and controller
// (see package net/kubemacpool for the paths it serves, the access it
// needs and how it keeps its pool).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
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
	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kubemacpool:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", 8443, "HTTPS port")
	certDir := flag.String("cert-dir", "/etc/webhook/certs", "directory of the serving certificate (tls.crt, tls.key), read at each TLS handshake")
	namespace := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMap "+kubemacpool.ConfigMap+" (default $POD_NAMESPACE)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *port < 1 || *port > 65535 {
		return fmt.Errorf("--port %d: not a TCP port", *port)
	}
	if *namespace == "" {
		return fmt.Errorf("--namespace (or $POD_NAMESPACE) is required")
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Serving from the start, ready (and admitting) once the watch rebuilt
	// the pool and read the range.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
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
	s := &kubemacpool.Server{Pool: macpool.New(macpool.Range{}), CertDir: *certDir, Callers: callers, MetricsGuard: guard, Log: log}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	if err := kubemacpool.Watch(ctx, cfg, scheme, *namespace, s); err != nil {
		stop()
		if serr := <-served; serr != nil {
			log.Error("serving", "err", serr)
		}
		return err
	}
	return <-served
}
