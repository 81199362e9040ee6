// Package arch checks the import direction between kubevmm's components.
package arch

import (
	"bufio"
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/kubevmm/kubevmm/"

// rules: packages under from (the folder itself and everything below it)
// must not depend, even indirectly, on any package under forbidden.
var rules = []struct {
	from      string
	forbidden []string
	why       string
}{
	{"api", []string{"controller", "handler", "virtapi", "launcher", "operator"}, "the API types are the bottom layer every component builds on"},
	{"vmm", []string{"controller", "handler", "virtapi", "launcher", "operator"}, "the VMM runs alone (bin/vmm) and knows nothing of Kubernetes components"},
	{"virtapi", []string{"handler", "controller", "vmm/machine", "vmm/kvm"}, "virt-api serves the API: no node agent, no controller, no VMM in it"},
	{"handler", []string{"vmm/machine", "controller"}, "virt-handler talks to launchers over their control API, never to a VMM in-process, and is no controller"},
	{"cmd/virt-handler", []string{"controller"}, "virt-handler's binary holds no virt-controller code"},
	{"cmd/virt-api", []string{"vmm/machine", "vmm/kvm"}, "virt-api's binary holds no VMM"},
	{"operator", []string{"vmm/machine", "vmm/kvm"}, "virt-operator deploys the components; it runs no VMM"},
	{"controller", []string{"operator"}, "the operator deploys virt-controller, not the other way round"},
	{"handler", []string{"operator"}, "the operator deploys virt-handler, not the other way round"},
	{"virtapi", []string{"operator"}, "the operator deploys virt-api, not the other way round"},
	{"storage/hostpath", []string{"api", "controller", "handler", "virtapi", "launcher", "operator", "vmm"}, "storage drivers serve any pod through the kubelet: nothing of KubeVirt or the VMM in them"},
	{"storage/cdi", []string{"controller", "handler", "launcher", "operator", "virtapi", "vmm/machine", "vmm/kvm"}, "CDI's services fill volumes for any consumer: disk images through vmm/block, no VMM, KubeVirt controller, node agent or virt-api; its operator deploys it, not the other way round (certificates and the front proxy's authentication come from api/certs and api/frontproxy)"},
	{"templatevalidator", []string{"controller", "handler", "operator", "vmm"}, "virt-template-validator is an admission webhook: no controller, node agent, operator or VMM in it"},
	{"cmd/virt-template-validator", []string{"controller", "handler", "operator", "vmm"}, "virt-template-validator's binary holds only the webhook"},
}

// under reports whether the import path is the folder dir of this module
// or below it.
func under(path, dir string) bool {
	p := strings.TrimPrefix(path, module)
	return p != path && (p == dir || strings.HasPrefix(p, dir+"/"))
}

func TestImportDirection(t *testing.T) {
	// Every package of the module with its transitive dependencies (tests
	// excluded: a test may reach further than the code it tests).
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading go list: %v", err)
	}
	pkgs := make([]string, 0, len(deps))
	for p := range deps {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, r := range rules {
		matched := false
		for _, pkg := range pkgs {
			if !under(pkg, r.from) {
				continue
			}
			matched = true
			for _, d := range deps[pkg] {
				for _, f := range r.forbidden {
					if under(d, f) {
						t.Errorf("%s depends on %s, but %s/... must not depend on %s/...: %s", pkg, d, r.from, f, r.why)
					}
				}
			}
		}
		if !matched {
			t.Errorf("rule for %s/... matches no package: the layout changed, update the rule", r.from)
		}
	}
}
