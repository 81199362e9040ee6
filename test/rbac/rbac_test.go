// Package rbac checks every component's RBAC against one reviewed
// allow-list (issue 26): a rule that grants escalate, bind, impersonate,
// any verb ("*"), any resource or group ("*"), or Secrets cluster-wide
// fails the test unless allowList names it with the reason, and the
// README's table states each of them.
package rbac

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	handlerrbac "github.com/kubevmm/kubevmm/handler/rbac"
	"github.com/kubevmm/kubevmm/net/kubemacpool"
	cdiinstall "github.com/kubevmm/kubevmm/operator/cdi/install"
	hcoinstall "github.com/kubevmm/kubevmm/operator/hco/install"
	"github.com/kubevmm/kubevmm/operator/hostpath"
	hpinstall "github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/network"
	netinstall "github.com/kubevmm/kubevmm/operator/network/install"
	"github.com/kubevmm/kubevmm/operator/ssp"
	virtinstall "github.com/kubevmm/kubevmm/operator/virt/install"
	"github.com/kubevmm/kubevmm/templatevalidator/webhook"
)

// deployed is every object the operators deploy, the operators included.
func deployed(t *testing.T) []client.Object {
	t.Helper()
	var out []client.Object
	add := func(objs []client.Object, err error) {
		t.Helper()
		require.NoError(t, err)
		out = append(out, objs...)
	}
	add(hcoinstall.Objects(hcoinstall.Config{Namespace: "kubevirt", ImageRegistry: "r", ImageTag: "t"}))
	add(virtinstall.Operator(virtinstall.Config{Namespace: "kubevirt", ImageRegistry: "r", ImageTag: "t"}))
	add(virtinstall.Objects(virtinstall.Config{Namespace: "kubevirt", ImageRegistry: "r", ImageTag: "t", CABundle: []byte("ca")}))
	add(cdiinstall.OperatorObjects(cdiinstall.OperatorConfig{}))
	add(cdiinstall.Objects(cdiinstall.Config{}))
	add(network.Operator(network.OperatorConfig{}))
	add(netinstall.Objects(netinstall.Config{}))
	add(hostpath.Operator(hostpath.OperatorConfig{}))
	add(hpinstall.Objects(hpinstall.Config{}), nil)
	add(ssp.Operator(ssp.OperatorConfig{}))
	return out
}

// roles are every component role with its rules, by who holds them. The
// roles rendered as objects, and those components build at run time
// (virt-handler's from its markers, kubemacpool's and the template
// validator's from their packages).
func roles(t *testing.T) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	for _, o := range deployed(t) {
		switch r := o.(type) {
		case *rbacv1.ClusterRole:
			if r.AggregationRule != nil || aggregated(r.Labels) {
				continue // users' roles (admin, edit, view), not a component's
			}
			out["ClusterRole "+r.Name] = r.Rules
		case *rbacv1.Role:
			out["Role "+r.Namespace+"/"+r.Name] = r.Rules
		}
	}
	var handler rbacv1.ClusterRole
	require.NoError(t, yaml.Unmarshal(handlerrbac.ClusterRole, &handler))
	out["ClusterRole "+handler.Name] = handler.Rules
	out["ClusterRole kubemacpool (package)"] = kubemacpool.ClusterRoleRules()
	out["ClusterRole virt-template-validator (package)"] = webhook.ClusterRoleRules()
	return out
}

func aggregated(labels map[string]string) bool {
	for k := range labels {
		if strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
			return true
		}
	}
	return false
}

// broad says what makes a rule broad ("" if nothing).
func broad(who string, r rbacv1.PolicyRule) string {
	var why []string
	for _, v := range r.Verbs {
		switch v {
		case "*":
			why = append(why, "every verb")
		case "escalate", "bind", "impersonate":
			why = append(why, v)
		}
	}
	if slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
		why = append(why, "every resource")
	}
	if strings.HasPrefix(who, "ClusterRole ") && slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")) {
		why = append(why, "Secrets cluster-wide")
	}
	return strings.Join(why, ", ")
}

// key names a broad rule in the allow-list.
func key(who string, r rbacv1.PolicyRule) string {
	return fmt.Sprintf("%s: %s %s %s", who, strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","), strings.Join(r.Verbs, ","))
}

// TestLeastPrivilege: every broad rule of every component is in the
// allow-list, and every entry of the list is still a broad rule (a rule
// narrowed leaves the list with it).
func TestLeastPrivilege(t *testing.T) {
	found := map[string]string{}
	for who, rules := range roles(t) {
		for _, r := range rules {
			if b := broad(who, r); b != "" {
				found[key(who, r)] = b
			}
		}
	}
	var unlisted []string
	for k, b := range found {
		if _, ok := allowList[k]; !ok {
			unlisted = append(unlisted, fmt.Sprintf("%s (%s)", k, b))
		}
	}
	sort.Strings(unlisted)
	assert.Empty(t, unlisted, "broad rules not in the reviewed allow-list (test/rbac/allowlist.go): narrow them, or list them with the reason")
	for k := range allowList {
		assert.Contains(t, found, k, "allow-list entry %q is no broad rule any more: remove it", k)
	}
}

// TestREADMEStatesTheBroadRules: the README's table has a row for each
// allow-list entry, with its reason.
func TestREADMEStatesTheBroadRules(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	readme, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "README.md"))
	require.NoError(t, err)
	var missing []string
	for _, row := range TableRows() {
		if !strings.Contains(string(readme), row) {
			missing = append(missing, row)
		}
	}
	assert.Empty(t, missing, "README.md's table of broad rules lacks these rows:\n%s", strings.Join(missing, "\n"))
}

// TableRows are the README's rows: component, rule, why.
func TableRows() []string {
	keys := make([]string, 0, len(allowList))
	for k := range allowList {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		who, rule, _ := strings.Cut(k, ": ")
		out[i] = fmt.Sprintf("| %s | `%s` | %s |", who, rule, allowList[k])
	}
	return out
}
