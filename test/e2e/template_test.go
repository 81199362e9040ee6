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

	"github.com/kubevmm/kubevmm/operator/ssp/templates"
)

// TestTemplates: `virtctl process TEMPLATE | kubectl apply -f -` makes a
// VM from a common template (deployed by the SSP operator), carrying the template's labels and its
// validation rules, sized as its flavor says; the VM is Halted (no guest
// is booted).
func TestTemplates(t *testing.T) {
	freshNamespace(t)
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
