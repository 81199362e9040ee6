package certs

import (
	"fmt"
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// FromKubeVirt is a KubeVirt CR's certificateRotateStrategy with
// KubeVirt's defaults, validated; an error names the field. virt-operator
// rotates by it, and so does the SSP operator (the HCO writes it from its
// certConfig).
func FromKubeVirt(s v1.KubeVirtCertificateRotateStrategy) (Strategy, error) {
	var sc v1.KubeVirtSelfSignConfiguration
	if s.SelfSigned != nil {
		sc = *s.SelfSigned
	}
	config := func(c *v1.CertConfig, duration time.Duration) Config {
		out := Config{Duration: duration}
		if c != nil && c.Duration != nil {
			out.Duration = c.Duration.Duration
		}
		out.RenewBefore = DefaultRenewBefore(out.Duration)
		if c != nil && c.RenewBefore != nil {
			out.RenewBefore = c.RenewBefore.Duration
		}
		return out
	}
	st := Strategy{CA: config(sc.CA, DefaultCADuration), Server: config(sc.Server, DefaultServerDuration)}
	if err := st.Validate(); err != nil {
		return st, fmt.Errorf("spec.certificateRotateStrategy.selfSigned.%w", err)
	}
	return st, nil
}
