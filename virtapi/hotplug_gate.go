package virtapi

import (
	"encoding/json"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/clusterconfig"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// hotplugEnabled reports whether the cluster enables KubeVirt's
// HotplugVolumes gate. The configuration is asked per request: the gate
// can be toggled on the KubeVirt CR while virt-api runs. Without a
// configuration (Config nil) no gate is enabled, as in KubeVirt.
func (s *Server) hotplugEnabled() (bool, error) {
	if s.Config == nil {
		return false, nil
	}
	c, err := s.Config()
	if err != nil {
		// Config keeps the last good configuration; an unreadable file
		// says nothing about the gate, so it is refused rather than
		// guessed.
		return false, err
	}
	return c.HasFeatureGate(clusterconfig.FeatureGateHotplugVolumes), nil
}

// hotplugGate refuses an addvolume/removevolume without the gate, with
// KubeVirt's status (400) and message.
func (s *Server) hotplugGate(op string) error {
	on, err := s.hotplugEnabled()
	if err != nil {
		return &opError{code: http.StatusInternalServerError, reason: metav1.StatusReasonInternalError, msg: "reading the cluster configuration: " + err.Error()}
	}
	if on {
		return nil
	}
	what := "Add"
	if op == "removevolume" {
		what = "Remove"
	}
	return badRequest("Unable to %s Volume because %s feature gate is not enabled.", what, clusterconfig.FeatureGateHotplugVolumes)
}

// gateHotplugSpecs wraps the VMI or VM validating webhook: without the
// gate a spec may not gain hotpluggable volumes (a create with one, an
// update that adds one). An update leaving them as they were passes, so
// that an object made while the gate was on can still be changed and
// deleted once it is off.
func (s *Server) gateHotplugSpecs(vm bool, next func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
			return next(req)
		}
		p, cur, err := hotplugVolumeNames(req.Object.Raw, vm)
		if err != nil {
			return admission.Refuse(http.StatusBadRequest, "cannot decode the object: "+err.Error())
		}
		if len(cur) == 0 {
			return next(req)
		}
		var old []string
		if req.Operation == admissionv1.Update {
			if _, old, err = hotplugVolumeNames(req.OldObject.Raw, vm); err != nil {
				return admission.Refuse(http.StatusBadRequest, "cannot decode the object: "+err.Error())
			}
		}
		var errs field.ErrorList
		for i, n := range cur {
			if n != "" && !slices.Contains(old, n) {
				errs = append(errs, field.Forbidden(p.Index(i), clusterconfig.FeatureGateHotplugVolumes+" feature gate is not enabled: hotpluggable volume "+n))
			}
		}
		if len(errs) == 0 {
			return next(req)
		}
		on, err := s.hotplugEnabled()
		if err != nil {
			return admission.Refuse(http.StatusInternalServerError, "reading the cluster configuration: "+err.Error())
		}
		if on {
			return next(req)
		}
		return admission.Deny(errs)
	}
}

// hotplugVolumeNames decodes a VMI (vm: a VM's template) and returns the
// path of its volumes and, per volume, its name when hotpluggable, ""
// otherwise (or nil when it has none).
func hotplugVolumeNames(raw []byte, vm bool) (*field.Path, []string, error) {
	var s *v1.VirtualMachineInstanceSpec
	p := field.NewPath("spec")
	if vm {
		o := &v1.VirtualMachine{}
		if err := json.Unmarshal(raw, o); err != nil {
			return nil, nil, err
		}
		if o.Spec.Template == nil {
			return nil, nil, nil
		}
		s, p = &o.Spec.Template.Spec, p.Child("template", "spec")
	} else {
		o := &v1.VirtualMachineInstance{}
		if err := json.Unmarshal(raw, o); err != nil {
			return nil, nil, err
		}
		s = &o.Spec
	}
	var names []string
	hot := false
	for _, v := range s.Volumes {
		n := ""
		if v.IsHotplug() {
			n, hot = v.Name, true
		}
		names = append(names, n)
	}
	if !hot {
		return p.Child("volumes"), nil, nil
	}
	return p.Child("volumes"), names, nil
}
