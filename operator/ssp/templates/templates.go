// Package templates holds kubevmm's common templates: Templates
// (template.openshift.io/v1) for Fedora and CentOS Stream 9 servers in the
// usual flavors, with the labels, annotations, parameters and memory rule
// of KubeVirt's common-templates, that the SSP operator installs. Each OS
// is one embedded YAML file rendered once per flavor.
package templates

import (
	"bytes"
	"embed"
	"fmt"
	"text/template"

	"sigs.k8s.io/yaml"

	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
)

// Version labels the set (template.kubevirt.io/version on each Template,
// vm.kubevirt.io/template.version on its VMs): change it, and Revision,
// when a template changes.
const (
	Version  = "v0.1.0"
	Revision = "1"
)

// Namespace is where the SSP operator puts the common templates unless told
// otherwise (KubeVirt's default, commonTemplates.namespace).
const Namespace = "openshift"

//go:embed *.yaml
var files embed.FS

// flavor is a size: vCPUs (sockets) and guest memory.
type flavor struct {
	Flavor  string
	CPUs    int
	Memory  string
	Default bool // the OS's default variant (template.kubevirt.io/default-os-variant)
}

// set is every common template: each file rendered with each of its flavors.
var set = []struct {
	file    string
	flavors []flavor
}{
	{"fedora.yaml", []flavor{
		{Flavor: "tiny", CPUs: 1, Memory: "1Gi"},
		{Flavor: "small", CPUs: 1, Memory: "2Gi", Default: true},
		{Flavor: "medium", CPUs: 1, Memory: "4Gi"},
		{Flavor: "large", CPUs: 2, Memory: "8Gi"},
	}},
	{"centos-stream9.yaml", []flavor{
		{Flavor: "small", CPUs: 1, Memory: "2Gi", Default: true},
		{Flavor: "medium", CPUs: 1, Memory: "4Gi"},
		{Flavor: "large", CPUs: 2, Memory: "8Gi"},
	}},
}

// Common returns the common templates, in namespace.
func Common(namespace string) ([]*templatev1.Template, error) {
	var out []*templatev1.Template
	for _, s := range set {
		src, err := files.ReadFile(s.file)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", s.file, err)
		}
		tmpl, err := template.New(s.file).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", s.file, err)
		}
		for _, f := range s.flavors {
			var b bytes.Buffer
			data := struct {
				flavor
				Version, Revision string
			}{f, Version, Revision}
			if err := tmpl.Execute(&b, data); err != nil {
				return nil, fmt.Errorf("rendering %s for %s: %w", s.file, f.Flavor, err)
			}
			t := &templatev1.Template{}
			if err := yaml.UnmarshalStrict(b.Bytes(), t); err != nil {
				return nil, fmt.Errorf("decoding %s for %s: %w", s.file, f.Flavor, err)
			}
			t.Namespace = namespace
			out = append(out, t)
		}
	}
	return out, nil
}
