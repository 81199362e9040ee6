package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// sspName is the SSP CR cluster-sync creates (HCO's name for it).
const sspName = "ssp-kubevirt-hyperconverged"

// processed is `virtctl process TEMPLATE -n openshift` with params, its
// one VirtualMachine changed by edit, written where `kubectl apply -f`
// reads it.
func processed(t *testing.T, template string, edit func(vm *unstructured.Unstructured), params ...string) string {
	t.Helper()
	args := []string{"process", template, "-n", "openshift", "-o", "json"}
	for _, p := range params {
		args = append(args, "-p", p)
	}
	out, err := run(t, "virtctl.sh", args...)
	if err != nil {
		t.Fatalf("virtctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	list := &unstructured.UnstructuredList{}
	if err := list.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("virtctl process printed no List: %v\n%s", err, out)
	}
	if len(list.Items) != 1 || list.Items[0].GetKind() != "VirtualMachine" {
		t.Fatalf("virtctl process: want one VirtualMachine, got %s", out)
	}
	if edit != nil {
		edit(&list.Items[0])
	}
	b, err := list.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), template+".json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSSP: cluster-sync's SSP CR is Available and has deployed the common
// instance types, preferences and templates and virt-template-validator.
// A VM processed from the common Fedora template with less memory than
// its rule asks is refused with the template's message; a VM whose rule is
// justWarning is admitted and kubectl prints the warning; a common template
// that a VM was made from cannot be deleted; a TektonTasks CR is a
// deprecated no-op. No guest boots (the VMs are Halted).
func TestSSP(t *testing.T) {
	freshNamespace(t)
	kubectl(t, "-n", "kubevirt", "wait", "ssp/"+sspName, "--for=condition=Available", "--timeout=120s")
	if got := kubectl(t, "-n", "kubevirt", "get", "ssp", sspName, "-o", "jsonpath={.status.phase}"); got != string(sspv1beta3.PhaseDeployed) {
		t.Errorf("SSP phase %q, want Deployed", got)
	}
	for _, obj := range []string{"virtualmachineclusterinstancetype/u1.small", "virtualmachineclusterinstancetype/o1.medium",
		"virtualmachineclusterinstancetype/cx1.medium", "virtualmachineclusterpreference/fedora", "virtualmachineclusterpreference/linux"} {
		if got := kubectl(t, "get", obj, "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by}"); got != "ssp-operator" {
			t.Errorf("%s managed by %q, want ssp-operator", obj, got)
		}
	}
	tmpls := kubectl(t, "-n", "openshift", "get", "templates", "-l", "template.kubevirt.io/type=base", "-o", "name")
	for _, want := range []string{"fedora-server-small", "centos-stream9-server-small"} {
		if !strings.Contains(tmpls, "template.template.openshift.io/"+want+"\n") {
			t.Errorf("no common template %s in namespace openshift:\n%s", want, tmpls)
		}
	}

	// Too little memory for the template's rule: refused, with its message.
	small := processed(t, "fedora-server-small", func(vm *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(vm.Object, "512Mi", "spec", "template", "spec", "domain", "memory", "guest"); err != nil {
			t.Fatal(err)
		}
	}, "NAME=fedora-small-memory")
	out, err := run(t, "kubectl.sh", "-n", ns, "apply", "-f", small)
	if err == nil || !strings.Contains(out, "This VM requires more memory.") {
		t.Errorf("a VM below the template's minimal memory: err=%v\n%s", err, out)
	}
	if out, err := run(t, "kubectl.sh", "-n", ns, "get", "vm", "fedora-small-memory"); err == nil {
		t.Errorf("the refused VM exists:\n%s", out)
	}

	// As the template has it: admitted, and the template is now in use.
	ok := processed(t, "fedora-server-small", nil, "NAME=fedora-vm")
	kubectl(t, "-n", ns, "apply", "-f", ok)
	if got := jsonpath(t, "vm/fedora-vm", "{.metadata.labels.vm\\.kubevirt\\.io/template}"); got != "fedora-server-small" {
		t.Errorf("the VM's vm.kubevirt.io/template label is %q", got)
	}
	out, err = run(t, "kubectl.sh", "-n", "openshift", "delete", "template", "fedora-server-small", "--wait=false")
	if err == nil || !strings.Contains(out, "denied") {
		t.Errorf("deleting a template a VM uses: err=%v\n%s", err, out)
	}
	kubectl(t, "-n", "openshift", "get", "template", "fedora-server-small")

	// A justWarning rule: admitted, kubectl prints the warning.
	rules := `[{"name":"recommended-memory","path":"jsonpath::.spec.domain.memory.guest","rule":"integer",` +
		`"message":"This VM has less memory than recommended.","min":1073741824,"justWarning":true}]`
	vm := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "warned", "annotations": map[string]any{"vm.kubevirt.io/validations": rules}},
		"spec": map[string]any{"runStrategy": "Halted", "template": map[string]any{"spec": map[string]any{
			"domain": map[string]any{"memory": map[string]any{"guest": "512Mi"}, "devices": map[string]any{}}}}}}
	b, err := json.Marshal(vm)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "warned.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out = kubectl(t, "-n", ns, "apply", "-f", f)
	if !strings.Contains(out, "Warning:") || !strings.Contains(out, "This VM has less memory than recommended.") {
		t.Errorf("kubectl printed no warning for the justWarning rule:\n%s", out)
	}
	kubectl(t, "-n", ns, "get", "vm", "warned")

	// tekton-tasks-operator's CR: accepted, Deprecated, nothing deployed.
	tto := filepath.Join(t.TempDir(), "tto.yaml")
	if err := os.WriteFile(tto, []byte("apiVersion: tektontasks.kubevirt.io/v1alpha1\nkind: TektonTasks\nmetadata:\n  name: tto\n"+
		"spec:\n  featureGates:\n    deployTektonTaskResources: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", ns, "apply", "-f", tto)
	wait(t, "tektontasks/tto", "condition=Deprecated", time.Minute)
}
