package kit

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An operator deploys its components' ServiceAccounts, Services,
// ConfigMaps and Secrets in its own namespace only, so it is granted those
// it deploys there only (a Role, OwnNamespaceRules) and reads them there only: its
// lists are limited to the namespace (InOwnNamespace) and so is its cache
// of them (OwnNamespaceCache), since a cluster-wide watch would need a
// cluster-wide grant, which for Secrets is every tenant's.

// ownNamespaceKinds are those kinds.
var ownNamespaceKinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	corev1.SchemeGroupVersion.WithKind("Service"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
}

// OwnNamespaceRules grant resources, some of those kinds, for a Role in
// the operator's namespace.
func OwnNamespaceRules(resources ...string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: resources,
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}
}

// OwnNamespaceCache limits the cache of those kinds, typed or metadata
// only, to namespace.
func OwnNamespaceCache(namespace string) cache.Options {
	by := map[client.Object]cache.ByObject{}
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &corev1.Service{}, &corev1.ConfigMap{}, &corev1.Secret{}} {
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
