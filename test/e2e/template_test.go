package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/operator/ssp/templates"
)

// installCommonTemplates installs the Template CRD and the common templates
// in their namespace, and removes them after the test, unless the CRD is
// already there (the SSP operator deploys both once the dev cluster runs
// it).
func installCommonTemplates(t *testing.T) {
	t.Helper()
	const crd = "templates.template.openshift.io"
	if _, err := run(t, "kubectl.sh", "get", "crd", crd); err == nil {
		return
	}
	kubectl(t, "apply", "-f", filepath.Join(repo, "api/template/crds/template.openshift.io_templates.yaml"))
	kubectl(t, "wait", "crd/"+crd, "--for=condition=Established", "--timeout=60s")
	all, err := templates.Common(templates.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + templates.Namespace + "\n"}
	for _, tp := range all {
		tp.APIVersion, tp.Kind = "template.openshift.io/v1", "Template"
		b, err := yaml.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	apply := exec.Command(filepath.Join(repo, "hack/kubectl.sh"), "apply", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Join(docs, "---\n"))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("applying the common templates: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// The CRD's templates go with it.
		_, _ = run(t, "kubectl.sh", "delete", "crd", crd, "--ignore-not-found")
		_, _ = run(t, "kubectl.sh", "delete", "namespace", templates.Namespace, "--ignore-not-found", "--wait=false")
	})
}

// TestTemplates: `virtctl process TEMPLATE | kubectl apply -f -` makes a
// VM from a common template, carrying the template's labels and its
// validation rules, sized as its flavor says; the VM is Halted (no guest
// is booted).
func TestTemplates(t *testing.T) {
	freshNamespace(t)
	installCommonTemplates(t)

	processApply := func(args string) string {
		t.Helper()
		cmd := exec.Command("bash", "-c", `set -o pipefail; "$1" -n `+templates.Namespace+` process `+args+` | "$2" -n "$3" apply -f - -o name`,
			"pipe", filepath.Join(repo, "hack/virtctl.sh"), filepath.Join(repo, "hack/kubectl.sh"), ns)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("virtctl process %s | kubectl apply: %v\n%s%s", args, err, out.String(), stderr.String())
		}
		return strings.TrimSpace(out.String())
	}

	if got := processApply("fedora-server-small -p NAME=tvm"); got != "virtualmachine.kubevirt.io/tvm" {
		t.Fatalf("applied %q, want the one VM tvm", got)
	}
	labels := map[string]string{}
	if err := json.Unmarshal([]byte(jsonpath(t, "vm/tvm", "{.metadata.labels}")), &labels); err != nil {
		t.Fatal(err)
	}
	for label, want := range map[string]string{
		"vm.kubevirt.io/template":              "fedora-server-small",
		"vm.kubevirt.io/template.namespace":    templates.Namespace,
		"vm.kubevirt.io/template.version":      templates.Version,
		"os.template.kubevirt.io/fedora40":     "true",
		"flavor.template.kubevirt.io/small":    "true",
		"workload.template.kubevirt.io/server": "true",
		"app":                                  "tvm",
	} {
		if labels[label] != want {
			t.Errorf("label %s = %q, want %q", label, labels[label], want)
		}
	}
	if got := jsonpath(t, "vm/tvm", "{.metadata.annotations.vm\\.kubevirt\\.io/validations}"); !strings.Contains(got, `"name": "minimal-required-memory"`) {
		t.Errorf("the VM lacks the template's validations: %q", got)
	}
	if got := jsonpath(t, "vm/tvm", "{.spec.template.spec.domain.memory.guest} {.spec.template.spec.domain.cpu.cores}"); got != "2Gi 1" {
		t.Errorf("size %q, want fedora-server-small's 2Gi and 1 core", got)
	}
	// Halted: virt-controller takes the VM in, and no VMI is made.
	wait(t, "vm/tvm", "jsonpath={.status.printableStatus}=Stopped", 2*time.Minute)
	if out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", "tvm"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("a Halted VM from a template has a VMI: %v\n%s", err, out)
	}

	// With no NAME, the template generates one as upstream's does.
	got := processApply("fedora-server-tiny")
	if !regexp.MustCompile(`^virtualmachine\.kubevirt\.io/fedora-[a-z0-9]{16}$`).MatchString(got) {
		t.Errorf("a VM with a generated NAME: applied %q", got)
	}
}
