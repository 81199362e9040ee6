// Command hostpath-provisioner is the hostpath provisioner's per-node
// daemon (see package storage/hostpath): the CSI driver
// kubevirt.io.hostpath-provisioner, registered with this node's kubelet,
// and the provisioner of the claims scheduled to this node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubevmm/kubevmm/storage/hostpath"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner:", err)
		os.Exit(1)
	}
}

// pools is the repeatable --storage-pool NAME=PATH flag.
type pools map[string]string

func (p pools) String() string { return fmt.Sprint(map[string]string(p)) }

func (p pools) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%q: want NAME=/ABSOLUTE/PATH", v)
	}
	if _, dup := p[name]; dup {
		return fmt.Errorf("storage pool %q given twice", name)
	}
	p[name] = path
	return nil
}

func run() error {
	var nodeName, kubeletRoot, probeAddr, namespace, owner string
	var interval time.Duration
	ps := pools{}
	flag.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node (default $NODE_NAME)")
	flag.StringVar(&kubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir: the sockets go to its plugins and plugins_registry directories")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8188", "address of /healthz and /readyz")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the CSIStorageCapacity objects (default $POD_NAMESPACE; none published without)")
	flag.StringVar(&owner, "capacity-owner", "", "the DaemonSet in --namespace that owns the CSIStorageCapacity objects (they go with it)")
	flag.DurationVar(&interval, "capacity-interval", time.Minute, "how often the pools' capacity is published besides when volumes come and go")
	flag.Var(ps, "storage-pool", "a storage pool, NAME=PATH (repeatable; at least one)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("hostpath-provisioner")
	if nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if len(ps) == 0 {
		return errors.New("at least one --storage-pool is required")
	}
	for name, path := range ps {
		if err := os.MkdirAll(path, 0o750); err != nil {
			return fmt.Errorf("storage pool %s: %w", name, err)
		}
	}
	d := &hostpath.Driver{NodeID: nodeName, Pools: ps}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	// Its capacity objects are read in its namespace only: its RBAC there.
	var cacheOpts cache.Options
	if namespace != "" {
		cacheOpts.ByObject = map[client.Object]cache.ByObject{&storagev1.CSIStorageCapacity{}: {Namespaces: map[string]cache.Config{namespace: {}}}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, HealthProbeBindAddress: probeAddr, Cache: cacheOpts,
		Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	p := &hostpath.Provisioner{Client: mgr.GetClient(), Driver: d, Recorder: mgr.GetEventRecorder("hostpath-provisioner")}
	if namespace != "" {
		p.Capacity = &hostpath.Capacity{Client: mgr.GetClient(), Driver: d, Namespace: namespace, Interval: interval}
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			if owner != "" {
				ref, err := daemonSetRef(ctx, mgr.GetAPIReader(), namespace, owner)
				if err != nil {
					return err
				}
				p.Capacity.Owner = ref
			}
			return p.Capacity.Start(ctx)
		})); err != nil {
			return err
		}
	}
	if err := p.SetupWithManager(mgr); err != nil {
		return err
	}
	sockets := hostpath.SocketsIn(kubeletRoot)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return hostpath.Serve(ctx, d, sockets, log) })); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting", "node", nodeName, "pools", ps.String())
	return mgr.Start(ctrl.SetupSignalHandler())
}

// daemonSetRef is the owner reference to DaemonSet namespace/name.
func daemonSetRef(ctx context.Context, r client.Reader, namespace, name string) (*metav1.OwnerReference, error) {
	var ds appsv1.DaemonSet
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &ds); err != nil {
		return nil, fmt.Errorf("--capacity-owner: reading DaemonSet %s/%s: %w", namespace, name, err)
	}
	return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}, nil
}
