// Command cdi-operator reconciles the cluster's CDI CR (cdi.kubevirt.io)
// into CDI's deployment (operator/cdi).
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/operator/cdi"
	cdiinstall "github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/operator/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cdi-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o cdi.Options
	var f manager.Flags
	flag.StringVar(&o.ImageRegistry, "image-registry", "localhost/kubevmm", "the components' image repository prefix")
	flag.StringVar(&o.ImageTag, "image-tag", "devel", "the components' image tag (and the version the CDI reports)")
	f.BindPullPolicy(flag.CommandLine, "the components' pull policy when spec.imagePullPolicy is unset (Always, IfNotPresent, Never)")
	f.Bind(flag.CommandLine, true)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o.PullPolicy, o.Version = f.PullPolicy, o.ImageTag
	return f.Run(manager.Operator{
		Name:             "cdi-operator",
		LeaderElectionID: "cdi-operator." + cdiv1.GroupName,
		AddToScheme:      []func(*runtime.Scheme) error{cdiv1.AddToScheme},
		OwnNamespace:     cdiinstall.Namespace,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &cdi.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the CDI reconciler: %w", err)
			}
			return nil, nil
		},
		Log: []any{"registry", o.ImageRegistry, "tag", o.ImageTag},
	})
}
