// Command ssp-operator reconciles the SSP CR (ssp.kubevirt.io/v1beta3)
// into the Template CRD, the common instance types and preferences, the
// common templates and virt-template-validator (operator/ssp), and
// answers TektonTasks CRs as a deprecated no-op.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/kubevmm/kubevmm/api/certs"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
	"github.com/kubevmm/kubevmm/operator/manager"
	"github.com/kubevmm/kubevmm/operator/ssp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ssp-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var o ssp.Options
	var f manager.Flags
	flag.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the operator's namespace, where the SSP must be (default $POD_NAMESPACE)")
	flag.StringVar(&o.ImageRegistry, "image-registry", "localhost/kubevmm", "virt-template-validator's image repository prefix")
	flag.StringVar(&o.ImageTag, "image-tag", "devel", "virt-template-validator's image tag (and the version the SSP reports)")
	flag.DurationVar(&o.CertSettle, "secret-propagation", certs.DefaultSettle, "how long a new CA of the validator's is published before a valid certificate is replaced by one it signs (the kubelet's sync period and cache)")
	f.BindPullPolicy(flag.CommandLine, "virt-template-validator's pull policy (Always, IfNotPresent, Never)")
	f.Bind(flag.CommandLine, true)
	if err := f.Parse(flag.CommandLine, os.Args[1:]); err != nil {
		return err
	}
	o.PullPolicy = f.PullPolicy
	if o.Namespace == "" {
		return errors.New("--namespace (or $POD_NAMESPACE) is required")
	}
	return f.Run(manager.Operator{
		Name:             "ssp-operator",
		LeaderElectionID: "ssp-operator.ssp.kubevirt.io",
		AddToScheme:      []func(*runtime.Scheme) error{sspv1beta3.AddToScheme, tektonv1alpha1.AddToScheme},
		OwnNamespace:     o.Namespace,
		Setup: func(mgr ctrl.Manager) (healthz.Checker, error) {
			r := &ssp.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: o}
			if err := r.SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the SSP reconciler: %w", err)
			}
			if err := (&ssp.TektonTasksReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("setting up the TektonTasks reconciler: %w", err)
			}
			return nil, nil
		},
		Log: []any{"namespace", o.Namespace, "registry", o.ImageRegistry, "tag", o.ImageTag},
	})
}
