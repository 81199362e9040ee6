package v1beta1

import (
	"encoding/json"
	"fmt"
	"sort"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

// ToV1 is in's v1 form. Feature gates come out sorted by name, each with
// its state spelled out.
func ToV1(in *HyperConverged) *hcov1.HyperConverged {
	s := in.Spec.DeepCopy()
	out := &hcov1.HyperConverged{ObjectMeta: *in.ObjectMeta.DeepCopy(), Status: *in.Status.DeepCopy()}
	out.APIVersion, out.Kind = hcov1.GroupVersion.String(), "HyperConverged"
	names := make([]string, 0, len(s.FeatureGates))
	for n := range s.FeatureGates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := hcov1.FeatureGateDisabled
		if s.FeatureGates[n] {
			st = hcov1.FeatureGateEnabled
		}
		out.Spec.FeatureGates = append(out.Spec.FeatureGates, hcov1.FeatureGate{Name: n, State: st})
	}
	v := &out.Spec.Virtualization
	v.LiveMigrationConfig = s.LiveMigrationConfig
	v.WorkloadUpdateStrategy = s.WorkloadUpdateStrategy
	v.VirtualMachineOptions = s.VirtualMachineOptions
	v.HigherWorkloadDensity = s.HigherWorkloadDensity
	if s.ResourceRequirements != nil {
		v.VmiCPUAllocationRatio = s.ResourceRequirements.VmiCPUAllocationRatio
	}
	if s.KubeMacPoolConfiguration != nil {
		out.Spec.Networking = &hcov1.NetworkingConfig{KubeMacPoolConfiguration: s.KubeMacPoolConfiguration}
	}
	out.Spec.WorkloadSources = hcov1.WorkloadSourcesConfig{CommonTemplatesNamespace: s.CommonTemplatesNamespace,
		EnableCommonBootImageImport: s.EnableCommonBootImageImport, CommonBootImageNamespace: s.CommonBootImageNamespace,
		DataImportCronTemplates: s.DataImportCronTemplates}
	out.Spec.Security.CertConfig = s.CertConfig
	out.Spec.Deployment = hcov1.DeploymentConfig{UninstallStrategy: s.UninstallStrategy, DeployVMConsoleProxy: s.DeployVMConsoleProxy}
	return out
}

// FromV1 is in's v1beta1 form. A gate without a state is enabled (as
// upstream reads it); deployment.deployNetworkResourcesInjector has no
// v1beta1 field and is dropped (unset and true mean the same in kubevmm,
// and false is refused).
func FromV1(in *hcov1.HyperConverged) *HyperConverged {
	s := in.Spec.DeepCopy()
	out := &HyperConverged{ObjectMeta: *in.ObjectMeta.DeepCopy(), Status: *in.Status.DeepCopy()}
	out.APIVersion, out.Kind = GroupVersion.String(), "HyperConverged"
	for _, g := range s.FeatureGates {
		if out.Spec.FeatureGates == nil {
			out.Spec.FeatureGates = map[string]bool{}
		}
		out.Spec.FeatureGates[g.Name] = g.State != hcov1.FeatureGateDisabled
	}
	v := s.Virtualization
	out.Spec.LiveMigrationConfig = v.LiveMigrationConfig
	out.Spec.WorkloadUpdateStrategy = v.WorkloadUpdateStrategy
	out.Spec.VirtualMachineOptions = v.VirtualMachineOptions
	out.Spec.HigherWorkloadDensity = v.HigherWorkloadDensity
	if v.VmiCPUAllocationRatio != nil {
		out.Spec.ResourceRequirements = &ResourceRequirements{VmiCPUAllocationRatio: v.VmiCPUAllocationRatio}
	}
	if s.Networking != nil {
		out.Spec.KubeMacPoolConfiguration = s.Networking.KubeMacPoolConfiguration
	}
	out.Spec.CommonTemplatesNamespace = s.WorkloadSources.CommonTemplatesNamespace
	out.Spec.EnableCommonBootImageImport = s.WorkloadSources.EnableCommonBootImageImport
	out.Spec.CommonBootImageNamespace = s.WorkloadSources.CommonBootImageNamespace
	out.Spec.DataImportCronTemplates = s.WorkloadSources.DataImportCronTemplates
	out.Spec.CertConfig = s.Security.CertConfig
	out.Spec.UninstallStrategy = s.Deployment.UninstallStrategy
	out.Spec.DeployVMConsoleProxy = s.Deployment.DeployVMConsoleProxy
	return out
}

// Convert is the conversion webhook's work on one object: doc, a
// HyperConverged in v1 or v1beta1 as JSON, in apiVersion to (the group's
// "hco.kubevirt.io/v1" or "hco.kubevirt.io/v1beta1").
func Convert(doc []byte, to string) ([]byte, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	var v1obj *hcov1.HyperConverged
	switch tm.APIVersion {
	case hcov1.GroupVersion.String():
		v1obj = &hcov1.HyperConverged{}
		if err := json.Unmarshal(doc, v1obj); err != nil {
			return nil, fmt.Errorf("decoding %s HyperConverged: %w", tm.APIVersion, err)
		}
	case GroupVersion.String():
		b := &HyperConverged{}
		if err := json.Unmarshal(doc, b); err != nil {
			return nil, fmt.Errorf("decoding %s HyperConverged: %w", tm.APIVersion, err)
		}
		v1obj = ToV1(b)
	default:
		return nil, fmt.Errorf("apiVersion %q: want %s or %s", tm.APIVersion, hcov1.GroupVersion, GroupVersion)
	}
	switch to {
	case hcov1.GroupVersion.String():
		v1obj.APIVersion, v1obj.Kind = to, "HyperConverged"
		return json.Marshal(v1obj)
	case GroupVersion.String():
		return json.Marshal(FromV1(v1obj))
	}
	return nil, fmt.Errorf("desired apiVersion %q: want %s or %s", to, hcov1.GroupVersion, GroupVersion)
}
