package dataimportcron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/registry"
)

// RegistryDigest is the DigestFunc of a cluster: the registry client
// with the template's secretRef (accessKeyId, secretKey) and
// certConfigMap (every value a PEM CA), read from the cron's namespace,
// insecure for a registry CDIConfig's insecureRegistries lists (as the
// importer pod that pulls it is).
func RegistryDigest(c client.Reader) DigestFunc {
	return func(ctx context.Context, namespace string, src *cdiv1.DataVolumeSource) (string, error) {
		if src == nil || src.Registry == nil || src.Registry.URL == nil {
			return "", errors.New("spec.template.spec.source.registry.url is required")
		}
		reg := src.Registry
		ref, err := registry.ParseURL(*reg.URL)
		if err != nil {
			return "", err
		}
		o := registry.Options{}
		if reg.Platform != nil {
			o.Architecture = reg.Platform.Architecture
		}
		if reg.SecretRef != nil && *reg.SecretRef != "" {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: *reg.SecretRef}, s); err != nil {
				return "", fmt.Errorf("secretRef %s: %w", *reg.SecretRef, err)
			}
			o.Username, o.Password = string(s.Data["accessKeyId"]), string(s.Data["secretKey"])
		}
		if reg.CertConfigMap != nil && *reg.CertConfigMap != "" {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: *reg.CertConfigMap}, cm); err != nil {
				return "", fmt.Errorf("certConfigMap %s: %w", *reg.CertConfigMap, err)
			}
			keys := make([]string, 0, len(cm.Data))
			for k := range cm.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				o.CAs = append(o.CAs, []byte(cm.Data[k]))
			}
		}
		cfg := &cdiv1.CDIConfig{}
		if err := c.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cfg); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("reading CDIConfig %s: %w", cdiv1.CDIConfigName, err)
		}
		o.Insecure = slices.Contains(cfg.Spec.InsecureRegistries, ref.Host)
		rc, err := registry.New(o)
		if err != nil {
			return "", err
		}
		return rc.Digest(ctx, ref)
	}
}
