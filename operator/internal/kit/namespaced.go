package kit

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An operator deploys its components' ServiceAccounts, Services,
// ConfigMaps, Secrets and NetworkPolicies in its own namespace only, so it
// is granted those it deploys there only (a Role, OwnNamespaceRules) and
// reads them there only: its
// lists are limited to the namespace (InOwnNamespace) and so is its cache
// of them (OwnNamespaceCache), since a cluster-wide watch would need a
// cluster-wide grant, which for Secrets is every tenant's.

// ownNamespaceKinds are those kinds.
var ownNamespaceKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"),
}

// OwnNamespaceRules grant resources, some of the core kinds above, and
// NetworkPolicies (every operator deploys its components' policies), for
// a Role in the operator's namespace.
func OwnNamespaceRules(resources ...string) []rbacv1.PolicyRule {
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources, Verbs: verbs},
		{APIGroups: []string{networkingv1.GroupName}, Resources: []string{"networkpolicies"}, Verbs: verbs}}
}

// OwnNamespaceCache limits the cache of those kinds, typed or metadata
// only, to namespace.
func OwnNamespaceCache(namespace string) cache.Options {
	by := map[client.Object]cache.ByObject{}
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &corev1.Service{}, &corev1.ConfigMap{}, &corev1.Secret{}, &networkingv1.NetworkPolicy{}} {
		by[obj] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	}
	return cache.Options{ByObject: by}
}

// InOwnNamespace is the list option for a kind an operator deploys:
// namespace for those kinds, nothing (every namespace, or a
// cluster-scoped kind) for the others.
func InOwnNamespace(gvk schema.GroupVersionKind, namespace string) []client.ListOption {
	for _, k := range ownNamespaceKinds {
		if k == gvk {
			return []client.ListOption{client.InNamespace(namespace)}
		}
	}
	return nil
}
