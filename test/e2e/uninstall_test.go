package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// installedKinds are what the operands' operators make; an uninstall must
// leave none of theirs behind.
const installedKinds = "deployments,daemonsets,services,configmaps,secrets,serviceaccounts,roles,rolebindings," +
	"clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations,apiservices," +
	"customresourcedefinitions,networkpolicies"

// TestUninstallAndReinstall: with no VM in the cluster, deleting the
// HyperConverged CR removes what it made and what its operands' operators
// deployed, leaving no stray webhook or APIService (whose missing backend
// would break admission and discovery for everybody) and no namespace
// stuck Terminating, as upstream users have met both. The same CR applied
// again brings everything back, so the tests after this one run on a
// reinstalled stack.
func TestUninstallAndReinstall(t *testing.T) {
	freshNamespace(t)
	noWorkloads(t)
	cr := reapplicable(t)
	before := objectNames(t)

	hcoKubectl(t, "delete", hcoName, "--wait=true", "--timeout=600s")
	for _, kind := range []string{"kubevirt", "ssp", "networkaddonsconfig", "cdi"} {
		if out, err := run(t, "kubectl.sh", "get", kind, "-A", "-o", "name"); err == nil && strings.TrimSpace(out) != "" {
			t.Errorf("%s left after the uninstall: %s", kind, out)
		}
	}
	after := objectNames(t)
	var removed []string
	for o := range before {
		if !after[o] {
			removed = append(removed, o)
		}
	}
	sort.Strings(removed)
	t.Logf("the uninstall removed %d objects: %s", len(removed), strings.Join(removed, " "))
	for _, o := range []string{
		"kubevirt/deployment.apps/virt-api", "kubevirt/deployment.apps/virt-controller", "kubevirt/daemonset.apps/virt-handler",
		"kubevirt/deployment.apps/virt-template-validator",
		"cluster-network-addons/deployment.apps/kubemacpool-mac-controller-manager",
		"cdi/deployment.apps/cdi-deployment",
		"/mutatingwebhookconfiguration.admissionregistration.k8s.io/virt-api-mutator",
		"/validatingwebhookconfiguration.admissionregistration.k8s.io/virt-api-validator",
		"/validatingwebhookconfiguration.admissionregistration.k8s.io/virt-template-validator",
		"/mutatingwebhookconfiguration.admissionregistration.k8s.io/kubemacpool-mutator",
		"/apiservice.apiregistration.k8s.io/v1.subresources.kubevirt.io",
		"kubevirt/networkpolicy.networking.k8s.io/virt-handler", "kubevirt/networkpolicy.networking.k8s.io/virt-template-validator",
		"cluster-network-addons/networkpolicy.networking.k8s.io/kubemacpool-mac-controller-manager",
		"cdi/networkpolicy.networking.k8s.io/cdi-deployment",
	} {
		if !before[o] {
			t.Errorf("%s was not there before the uninstall: this test's list is out of date", o)
		} else if after[o] {
			t.Errorf("%s is left after the uninstall", o)
		}
	}
	if out := kubectl(t, "get", installedKinds, "-A", "-l", "app.kubernetes.io/managed-by=virt-operator", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("virt-operator's objects left after the uninstall:\n%s", out)
	}
	noStrayAdmission(t)
	noTerminatingNamespace(t)

	t.Log("reinstalling")
	kubectl(t, "create", "-f", cr)
	hcoWait(t, hcoName, "condition=Available", 10*time.Minute)
	for _, w := range []struct{ ns, what string }{
		{hcoNS, "deployment/virt-api"}, {hcoNS, "deployment/virt-controller"}, {hcoNS, "daemonset/virt-handler"},
		{hcoNS, "deployment/virt-template-validator"},
		{"cluster-network-addons", "deployment/kubemacpool-mac-controller-manager"},
	} {
		kubectl(t, "-n", w.ns, "rollout", "status", w.what, "--timeout=300s")
	}
	kubectl(t, "wait", "crd/virtualmachines.kubevirt.io", "--for=condition=Established", "--timeout=60s")
	hcoWait(t, "ssp/ssp-kubevirt-hyperconverged", "condition=Available", 5*time.Minute)
	kubectl(t, "wait", "networkaddonsconfig/cluster", "--for=condition=Available", "--timeout=300s")
	kubectl(t, "wait", "cdi/cdi-kubevirt-hyperconverged", "--for=condition=Available", "--timeout=300s")
	noStrayAdmission(t)
	// The reinstalled stack admits a VM (through virt-api's, kubemacpool's
	// and the template validator's webhooks, with their new certificates).
	kubectl(t, "-n", ns, "create", "-f", filepath.Join(repo, "test", "e2e", "testdata", "kubevirt-vm-cirros.yaml"))
	kubectl(t, "-n", ns, "delete", "vm", "vm-cirros", "--wait=true")
}

// noWorkloads waits until no VM or VMI is left in the cluster (the tests
// before this one delete theirs with their namespaces), since the HCO's
// webhook refuses an uninstall while any exists.
func noWorkloads(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out := kubectl(t, "get", "vm,vmi", "-A", "-o", "name")
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("VMs or VMIs still in the cluster, the uninstall would be refused:\n%s", out)
		}
		time.Sleep(2 * time.Second)
	}
}

// reapplicable writes the cluster's HyperConverged CR, as its owner wrote
// it (name, annotations, spec), to a file `kubectl create -f` takes.
func reapplicable(t *testing.T) string {
	t.Helper()
	var cur struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal([]byte(hcoKubectl(t, "get", hcoName, "-o", "json")), &cur); err != nil {
		t.Fatal(err)
	}
	delete(cur.Metadata.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
	b, err := json.Marshal(cur)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "hco.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// objectNames lists installedKinds cluster-wide as namespace/kind/name.
func objectNames(t *testing.T) map[string]bool {
	t.Helper()
	out := kubectl(t, "get", installedKinds, "-A", "-o",
		`jsonpath={range .items[*]}{.metadata.namespace}/{.kind}/{.metadata.name}{"\n"}{end}`)
	// `-o name` spells kinds as resource.group; jsonpath gives the Kind,
	// so map it to the same spelling the assertions use.
	group := map[string]string{
		"Deployment": "deployment.apps", "DaemonSet": "daemonset.apps", "Service": "service", "ConfigMap": "configmap",
		"Secret": "secret", "ServiceAccount": "serviceaccount", "Role": "role.rbac.authorization.k8s.io",
		"RoleBinding": "rolebinding.rbac.authorization.k8s.io", "ClusterRole": "clusterrole.rbac.authorization.k8s.io",
		"ClusterRoleBinding":             "clusterrolebinding.rbac.authorization.k8s.io",
		"ValidatingWebhookConfiguration": "validatingwebhookconfiguration.admissionregistration.k8s.io",
		"MutatingWebhookConfiguration":   "mutatingwebhookconfiguration.admissionregistration.k8s.io",
		"APIService":                     "apiservice.apiregistration.k8s.io",
		"CustomResourceDefinition":       "customresourcedefinition.apiextensions.k8s.io",
		"NetworkPolicy":                  "networkpolicy.networking.k8s.io",
	}
	names := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		p := strings.SplitN(l, "/", 3)
		if len(p) != 3 {
			continue
		}
		k, ok := group[p[1]]
		if !ok {
			t.Fatalf("unexpected kind in %q", l)
		}
		names[p[0]+"/"+k+"/"+p[2]] = true
	}
	return names
}

// noStrayAdmission: every webhook and aggregated API the cluster still
// has is backed by a Service that exists, and every APIService is
// Available; a stray one fails requests cluster-wide.
func noStrayAdmission(t *testing.T) {
	t.Helper()
	for _, kind := range []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"} {
		out := kubectl(t, "get", kind, "-o",
			`jsonpath={range .items[*]}{range .webhooks[*]}{.clientConfig.service.namespace}/{.clientConfig.service.name} {.name}{"\n"}{end}{end}`)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 2 || f[0] == "/" {
				continue // a URL webhook, or none
			}
			svc := strings.SplitN(f[0], "/", 2)
			if _, err := run(t, "kubectl.sh", "-n", svc[0], "get", "service", svc[1]); err != nil {
				t.Errorf("%s webhook %s points at a missing Service %s", kind, f[1], f[0])
			}
		}
	}
	out := kubectl(t, "get", "apiservices", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Available")].status}{"\n"}{end}`)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[1] != "True" {
			t.Errorf("APIService %s is not Available", f[0])
		}
	}
}

// noTerminatingNamespace: namespaces the uninstall deleted finish
// deleting; none stays Terminating.
func noTerminatingNamespace(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out := kubectl(t, "get", "namespaces", "-o",
			`jsonpath={range .items[?(@.status.phase=="Terminating")]}{.metadata.name} {end}`)
		if strings.TrimSpace(out) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespaces stuck Terminating after the uninstall: %s", out)
		}
		time.Sleep(2 * time.Second)
	}
}
