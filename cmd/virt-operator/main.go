// Command virt-operator installs kubevmm from the KubeVirt CR
// (kubevirt.io/v1): it reconciles the CR into the CRDs, RBAC, virt-api,
// virt-controller, virt-handler, webhooks and APIService (operator/virt),
// in its own namespace.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/kubevmm/kubevmm/operator/manager"
	"github.com/kubevmm/kubevmm/operator/virt"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "virt-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	o := virt.Options{Namespace: os.Getenv("POD_NAMESPACE")}
	var f manager.Flags
	flag.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the components (default: $POD_NAMESPACE, the operator's own)")
	flag.StringVar(&o.ImageRegistry, "image-registry", "localhost/kubevmm", "images' repository prefix when the KubeVirt CR sets no imageRegistry")
	flag.StringVar(&o.ImageTag, "image-tag", "devel", "images' tag when the KubeVirt CR sets no imageTag")
	flag.StringVar(&o.PluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory on the nodes")
	flag.StringVar(&o.KubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir on the nodes")
	// The kubelet's default sync period is a minute, plus its cache's TTL.
	flag.DurationVar(&o.SecretPropagation, "secret-propagation", 2*time.Minute, "how long the kubelet may take to update a mounted Secret: a new CA signs leaves only once published that long")
	f.BindPullPolicy(flag.CommandLine, "pull policy when the KubeVirt CR sets none (Always, IfNotPresent, Never)")
	f.Bind(flag.CommandLine, false)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o.PullPolicy = f.PullPolicy
	if o.Namespace == "" {
		return fmt.Errorf("--namespace (or $POD_NAMESPACE) is required")
	}
	f.LeaseNamespace = o.Namespace
	return f.Run(manager.Operator{
		Name:             "virt-operator",
		LeaderElectionID: "virt-operator.kubevirt.io",
		// The replaced pod of a rollout hands over at once.
		Options:      ctrl.Options{LeaderElectionReleaseOnCancel: true},
		OwnNamespace: o.Namespace,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &virt.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the KubeVirt reconciler: %w", err)
			}
			return nil, nil
		},
		Log: []any{"namespace", o.Namespace, "registry", o.ImageRegistry, "tag", o.ImageTag},
	})
}
