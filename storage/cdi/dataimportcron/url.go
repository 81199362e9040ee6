package dataimportcron

import (
	"encoding/json"
	"errors"
	"fmt"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// registryURL is the template's spec.source.registry.url.
func registryURL(s *cdiv1.DataVolumeSpec) (string, error) {
	if s.Source == nil || s.Source.Registry == nil {
		return "", errors.New("spec.template.spec.source.registry is required")
	}
	var r struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(s.Source.Registry.Raw, &r); err != nil {
		return "", fmt.Errorf("spec.template.spec.source.registry: %w", err)
	}
	if r.URL == "" {
		return "", errors.New("spec.template.spec.source.registry.url is required")
	}
	return r.URL, nil
}

// setRegistryURL replaces spec.source.registry.url, keeping the rest.
func setRegistryURL(s *cdiv1.DataVolumeSpec, url string) error {
	m := map[string]any{}
	if err := json.Unmarshal(s.Source.Registry.Raw, &m); err != nil {
		return fmt.Errorf("spec.template.spec.source.registry: %w", err)
	}
	m["url"] = url
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("spec.template.spec.source.registry: %w", err)
	}
	s.Source.Registry.Raw = raw
	return nil
}
