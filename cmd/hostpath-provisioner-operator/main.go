// Command hostpath-provisioner-operator reconciles HostPathProvisioners
// (hostpathprovisioner.kubevirt.io/v1beta1) into the hostpath
// provisioner's CSI driver serving their storage pools (operator/hostpath).
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath"
	hppinstall "github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hostpath-provisioner-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o hostpath.Options
	var f manager.Flags
	var registry string
	flag.StringVar(&registry, "image-registry", "localhost/kubevmm", "the driver's image repository prefix (its image is REGISTRY/hostpath-provisioner:TAG)")
	flag.StringVar(&o.Version, "image-tag", "devel", "the driver's image tag (and the version the HostPathProvisioner reports)")
	flag.StringVar(&o.KubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir on the nodes")
	f.BindPullPolicy(flag.CommandLine, "the driver's pull policy when spec.imagePullPolicy is unset (Always, IfNotPresent, Never)")
	f.Bind(flag.CommandLine, true)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o.PullPolicy = f.PullPolicy
	o.Image = registry + "/hostpath-provisioner:" + o.Version
	return f.Run(manager.Operator{
		Name:             "hostpath-provisioner-operator",
		LeaderElectionID: "hostpath-provisioner-operator." + hppv1.GroupName,
		AddToScheme:      []func(*runtime.Scheme) error{hppv1.AddToScheme},
		OwnNamespace:     hppinstall.Namespace,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &hostpath.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the HostPathProvisioner reconciler: %w", err)
			}
			return nil, nil
		},
		Log: []any{"registry", registry, "tag", o.Version},
	})
}
