// Command virt-handler is the per-node daemon (see package handler): device
// plugins for /dev/kvm and /dev/net/tun, the node's schedulable label, the
// VMI status loop over the launchers' sockets, and the node-side API
// virt-api uses for pause, unpause and the serial console.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/handler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-handler:", err)
		os.Exit(1)
	}
}

// options are virt-handler's flags.
type options struct {
	nodeName, podsDir, seccompDir, pluginDir, kubeletPlugins string
	certDir, podIP, probeAddr, metricsAddr                   string
	devices                                                  int
}

func run() error {
	var o options
	flag.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node (default $NODE_NAME)")
	flag.StringVar(&o.podsDir, "kubelet-pods-dir", "/var/lib/kubelet/pods", "the kubelet's pods directory (<kubelet root>/pods), where the launcher pods' socket directories (emptyDirs) are")
	flag.StringVar(&o.kubeletPlugins, "kubelet-plugins-dir", "/var/lib/kubelet/plugins", "the kubelet's plugins directory (<kubelet root>/plugins), where CSI publishes Block volumes for pods")
	flag.StringVar(&o.seccompDir, "seccomp-dir", "/var/lib/kubelet/seccomp", "the kubelet's seccomp directory (<kubelet root>/seccomp), where the launcher pods' profile goes")
	flag.StringVar(&o.pluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory")
	flag.StringVar(&o.certDir, "cert-dir", "/etc/virt-handler/certs", "tls.crt, tls.key and ca.crt: the server virt-api talks to, and both ends of migration streams between handlers")
	flag.StringVar(&o.podIP, "pod-ip", os.Getenv("POD_IP"), "this handler's pod IP, where other handlers send migration streams (default $POD_IP)")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8187", "address of /healthz and /readyz")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus /metrics endpoint (HTTPS, a bearer token allowed to GET /metrics); 0 disables it")
	flag.IntVar(&o.devices, "device-count", handler.DefaultDeviceCount, "devices.kubevirt.io/kvm, /tun and /userfaultfd offered by this node")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("virt-handler")
	if o.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if o.podIP == "" {
		return errors.New("--pod-ip (or $POD_IP) is required")
	}
	certs := handler.TLSFiles{Cert: o.certDir + "/tls.crt", Key: o.certDir + "/tls.key", CA: o.certDir + "/ca.crt"}
	migTLS, err := handler.NewMigrationTLS(certs)
	if err != nil {
		return err
	}
	migrations := &handler.MigrationServer{TLS: migTLS.Server, Logf: func(f string, a ...any) { log.Info(fmt.Sprintf(f, a...)) }}

	// Before the node is labelled schedulable: a launcher container
	// cannot be created without its profile.
	if err := handler.InstallSeccompProfile(o.seccompDir); err != nil {
		return err
	}
	mgr, err := newManager(o)
	if err != nil {
		return err
	}
	kick := make(chan event.GenericEvent, 64)
	if err := addControllers(mgr, o, migTLS, migrations, kick); err != nil {
		return err
	}
	for _, d := range []struct {
		res, path string
		optional  bool
	}{
		{string(v1.KVMResource), "/dev/kvm", false},
		{string(v1.TunResource), "/dev/net/tun", false},
		{string(v1.UserfaultfdResource), "/dev/userfaultfd", true},
	} {
		p := &handler.DevicePlugin{Resource: d.res, DevPath: d.path, Count: o.devices, Optional: d.optional, Dir: o.pluginDir, Log: log}
		if err := mgr.Add(manager.RunnableFunc(p.Run)); err != nil {
			return err
		}
	}
	if err := addServers(mgr, o, certs, migrations, kick, log); err != nil {
		return err
	}
	// Scrapes read the cache (this node's VMIs and pods) and the launchers.
	if err := ctrlmetrics.Registry.Register(&handler.MetricsCollector{Client: mgr.GetClient(), NodeName: o.nodeName, PodsDir: o.podsDir}); err != nil {
		return fmt.Errorf("registering the metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting virt-handler", "node", o.nodeName)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// newManager is the controller manager, its cache holding this node's
// objects only: VMIs labelled with it, pods scheduled to it, and the node
// itself.
func newManager(o options) (ctrl.Manager, error) {
	scheme, err := kvscheme.New()
	if err != nil {
		return nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                securemetrics.Options(o.metricsAddr),
		HealthProbeBindAddress: o.probeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1.VirtualMachineInstance{}: {Label: labels.SelectorFromSet(labels.Set{v1.NodeNameLabel: o.nodeName})},
			&corev1.Pod{}:                {Field: fields.OneTermEqualSelector("spec.nodeName", o.nodeName)},
			&corev1.Node{}:               {Field: fields.OneTermEqualSelector("metadata.name", o.nodeName)},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}

// addControllers sets up the VMI, migration target and node controllers.
func addControllers(mgr ctrl.Manager, o options, migTLS *handler.MigrationTLS, migrations *handler.MigrationServer, kick chan event.GenericEvent) error {
	if err := (&handler.VMIReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), NodeName: o.nodeName, PodsDir: o.podsDir, PluginsDir: o.kubeletPlugins,
		Recorder: mgr.GetEventRecorder("virt-handler"), Kick: kick, MigrationTLS: migTLS,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the VMI controller: %w", err)
	}
	if err := (&handler.MigrationTargetReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), NodeName: o.nodeName, PodsDir: o.podsDir,
		Recorder: mgr.GetEventRecorder("virt-handler"), PodIP: o.podIP, Migrations: migrations,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the migration target controller: %w", err)
	}
	if err := (&handler.NodeReconciler{Client: mgr.GetClient(), NodeName: o.nodeName}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the node controller: %w", err)
	}
	return nil
}

// addServers runs the migration server (streams from other handlers) and
// the HTTPS server virt-api talks to.
func addServers(mgr ctrl.Manager, o options, certs handler.TLSFiles, migrations *handler.MigrationServer, kick chan event.GenericEvent, log logr.Logger) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(vmispec.HandlerMigrationPort))
		if err != nil {
			return fmt.Errorf("virt-handler migration server: %w", err)
		}
		return migrations.Serve(ctx, l)
	})); err != nil {
		return err
	}
	tlsCfg, err := handler.ServerTLS(certs)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:   (&handler.Server{Client: mgr.GetClient(), NodeName: o.nodeName, PodsDir: o.podsDir, Kick: kick, Log: log}).Handler(),
		TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second,
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(handler.Port))
		if err != nil {
			return fmt.Errorf("virt-handler server: %w", err)
		}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// Past the grace time open requests are cut: nothing to save.
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}))
}
