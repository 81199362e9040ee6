package kubemacpool

import (
	"context"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/net/macpool"
)

// Upstream's names.
const (
	// WebhookName is the mutating webhook's name.
	WebhookName = "mutatevirtualmachines.kubemacpool.io"
	// OptOutLabel on a namespace, with value OptOutValue, leaves its VMs
	// alone (the webhook's namespaceSelector).
	OptOutLabel = "mutatevirtualmachines.kubemacpool.io"
	OptOutValue = "ignore"
	// ConfigMap holds the range, keys KeyRangeStart and KeyRangeEnd.
	ConfigMap     = "kubemacpool-mac-range-config"
	KeyRangeStart = "RANGE_START"
	KeyRangeEnd   = "RANGE_END"
)

// ClusterRoleRules is the API access kubemacpool needs everywhere: the
// VMs, watched, and the reviews of its scrapers' tokens.
func ClusterRoleRules() []rbacv1.PolicyRule {
	return append([]rbacv1.PolicyRule{
		{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines"}, Verbs: []string{"list", "watch"}},
	}, securemetrics.ReviewRules()...)
}

// RoleRules is its access in its own namespace: the range's ConfigMap,
// watched.
func RoleRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}},
	}
}

// MutatingWebhook is the webhook configuration calling service (in
// namespace) at PathMutateVM for VM creates and updates, except in
// namespaces labelled OptOutLabel=OptOutValue. Failure policy Fail: a VM
// admitted without kubemacpool could get a MAC it later hands out.
func MutatingWebhook(name, namespace, service string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: caBundle,
				Service: &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To(PathMutateVM)}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{v1.GroupName}, APIVersions: []string{"v1"},
					Resources: []string{"virtualmachines"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: OptOutLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{OptOutValue}}}},
			FailurePolicy:  ptr.To(admissionregistrationv1.Fail),
			SideEffects:    ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds: ptr.To(int32(10)),
			// Other mutating webhooks may add interfaces.
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// Watch keeps s.Pool true until ctx ends: the VMs (each VM's MACs held
// under its name, a deleted VM's freed) and the range from the ConfigMap
// in namespace (reloaded on change; an invalid one is logged and the last
// good range kept). Once the initial list of VMs is in the pool and a
// range is set, the server is ready. It returns when the watch cannot
// start or the initial list fails; afterwards, informers retry.
func Watch(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, namespace string, s *Server) error {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{namespace: {}},
			Field: fields.OneTermEqualSelector("metadata.name", ConfigMap)},
	}})
	if err != nil {
		return fmt.Errorf("API cache: %w", err)
	}
	log := s.Log
	rangeSet := make(chan struct{})
	var rangeOnce bool
	cmInf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("watching ConfigMap %s/%s: %w", namespace, ConfigMap, err)
	}
	onConfig := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		r, ok, err := macpool.ParseRange(cm.Data[KeyRangeStart], cm.Data[KeyRangeEnd])
		if err == nil && !ok {
			err = fmt.Errorf("no %s and %s", KeyRangeStart, KeyRangeEnd)
		}
		if err != nil {
			log.Error("invalid MAC range, the last one is kept", "configMap", namespace+"/"+ConfigMap, "err", err)
			return
		}
		if old := s.Pool.Range(); old != r || !rangeOnce {
			log.Info("MAC range", "start", r.Start.String(), "end", r.End.String())
		}
		s.Pool.SetRange(r)
		if !rangeOnce {
			rangeOnce = true
			close(rangeSet)
		}
	}
	if _, err := cmInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onConfig, UpdateFunc: func(_, obj any) { onConfig(obj) },
	}); err != nil {
		return err
	}
	vmInf, err := vmInformer(ctx, c, s)
	if err != nil {
		return err
	}
	onVM := func(obj any) {
		vm, ok := obj.(*v1.VirtualMachine)
		if !ok {
			return
		}
		macs, errs := macpool.VMMACs(vm)
		for _, err := range errs {
			log.Warn("a VM's MAC is not held", "err", err)
		}
		s.Pool.Confirm(macpool.Owner(vm.Namespace, vm.Name), macs)
	}
	vmReg, err := vmInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onVM, UpdateFunc: func(_, obj any) { onVM(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if vm, ok := obj.(*v1.VirtualMachine); ok {
				s.Pool.Release(macpool.Owner(vm.Namespace, vm.Name))
				log.Info("released the MACs of a deleted VM", "vm", vm.Namespace+"/"+vm.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	// The handler's initial adds, not only the informer's list: the pool
	// holds every VM's MACs before the server is ready.
	if !c.WaitForCacheSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), vmReg.HasSynced) {
		select {
		case err := <-errc:
			return fmt.Errorf("listing the VMs: %w", err)
		default:
			return fmt.Errorf("listing the VMs: %w", ctx.Err())
		}
	}
	log.Info("the MAC pool is rebuilt from the VMs", "collisions", len(s.Pool.Collisions()))
	go s.expireReservations(ctx)
	go func() {
		select {
		case <-rangeSet:
			s.SetReady()
			log.Info("ready")
		case <-ctx.Done():
		}
	}()
	return nil
}

// vmInformer is the VMs' informer, once their CRD is served: kubemacpool
// may start before KubeVirt's operator installed it.
func vmInformer(ctx context.Context, c cache.Cache, s *Server) (cache.Informer, error) {
	logged := false
	for {
		inf, err := c.GetInformer(ctx, &v1.VirtualMachine{})
		if err == nil {
			return inf, nil
		}
		if !meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("watching VirtualMachines: %w", err)
		}
		if !logged {
			s.Log.Info("waiting for the VirtualMachine CRD", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("watching VirtualMachines: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}
