package virtapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The start/stop/restart/migrate semantics against a real kube-apiserver
// (envtest; `make test` builds its binaries). No controller runs: the test
// checks what virt-api writes for virt-controller to act on.
func TestSubresourcesEnvtest(t *testing.T) {
	_, c := apiserver.Start(t)
	s := &Server{Client: c, Log: logr.Discard()}
	ctx := context.Background()
	ns := "default"
	g := resource.MustParse("128Mi")
	tmpl := &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}}}

	isConflict := func(err error) bool {
		var oe *opError
		return errors.As(err, &oe) && oe.code == 409
	}
	get := func(name string) *v1.VirtualMachine {
		vm := &v1.VirtualMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
			t.Fatal(err)
		}
		return vm
	}

	// Always <-> Halted through the spec.
	always := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "always", Namespace: ns},
		Spec: v1.VirtualMachineSpec{RunStrategy: ptr.To(v1.RunStrategyAlways), Template: tmpl}}
	if err := c.Create(ctx, always); err != nil {
		t.Fatal(err)
	}
	if err := s.vmStateChange(ctx, ns, "always", "start"); !isConflict(err) {
		t.Fatalf("start on Always: %v, want a conflict", err)
	}
	if err := s.vmStateChange(ctx, ns, "always", "stop"); err != nil {
		t.Fatal(err)
	}
	if rs := *get("always").Spec.RunStrategy; rs != v1.RunStrategyHalted {
		t.Fatalf("after stop: %s, want Halted", rs)
	}
	if err := s.vmStateChange(ctx, ns, "always", "stop"); !isConflict(err) {
		t.Fatalf("stop on a stopped VM: %v, want a conflict", err)
	}
	if err := s.vmStateChange(ctx, ns, "always", "start"); err != nil {
		t.Fatal(err)
	}
	if rs := *get("always").Spec.RunStrategy; rs != v1.RunStrategyAlways {
		t.Fatalf("after start: %s, want Always", rs)
	}

	// Manual: state change requests for virt-controller.
	manual := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: ns},
		Spec: v1.VirtualMachineSpec{RunStrategy: ptr.To(v1.RunStrategyManual), Template: tmpl}}
	if err := c.Create(ctx, manual); err != nil {
		t.Fatal(err)
	}
	if err := s.vmStateChange(ctx, ns, "manual", "restart"); !isConflict(err) {
		t.Fatalf("restart without a VMI: %v, want a conflict", err)
	}
	if err := s.vmStateChange(ctx, ns, "manual", "start"); err != nil {
		t.Fatal(err)
	}
	if r := get("manual").Status.StateChangeRequests; len(r) != 1 || r[0].Action != v1.StartRequest {
		t.Fatalf("requests after start: %+v", r)
	}
	// virt-controller would now create the VMI and drop the request.
	vm := get("manual")
	vm.Status.StateChangeRequests = nil
	if err := c.Status().Update(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: ns}, Spec: tmpl.Spec}
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if err := s.migrate(ctx, ns, "manual"); !isConflict(err) {
		t.Fatalf("migrating a VMI that does not run: %v, want a conflict", err)
	}
	if err := s.vmStateChange(ctx, ns, "manual", "restart"); err != nil {
		t.Fatal(err)
	}
	r := get("manual").Status.StateChangeRequests
	if len(r) != 2 || r[0].Action != v1.StopRequest || r[0].UID == nil || *r[0].UID != vmi.UID || r[1].Action != v1.StartRequest {
		t.Fatalf("requests after restart: %+v", r)
	}
	if err := s.vmStateChange(ctx, ns, "manual", "start"); !isConflict(err) {
		t.Fatalf("start while running: %v, want a conflict", err)
	}

	vmi.Status.Phase = v1.Running
	if err := c.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if err := s.migrate(ctx, ns, "manual"); err != nil {
		t.Fatal(err)
	}
	migs := &v1.VirtualMachineInstanceMigrationList{}
	if err := c.List(ctx, migs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(migs.Items) != 1 || migs.Items[0].Spec.VMIName != "manual" {
		t.Fatalf("migrations %+v", migs.Items)
	}

	// vsock: the query is checked first, then the VMI must have
	// autoattachVSOCK; one that has it goes on to its node's virt-handler
	// (none here).
	vsock := func(name, query string) (int, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/vsock?"+query, nil)
		r.SetPathValue("namespace", ns)
		r.SetPathValue("name", name)
		s.vsock(w, r, userInfo{Name: "u"})
		return w.Code, w.Body.String()
	}
	for _, tc := range []struct {
		name, query string
		code        int
		msg         string
	}{
		{"manual", "port=1234", http.StatusBadRequest, "kubevmm streams vsock connections without TLS"},
		{"manual", "port=0&tls=false", http.StatusBadRequest, "want a vsock port number"},
		{"manual", "port=1234&tls=false", http.StatusBadRequest, "VSOCK is not attached"},
		{"absent", "port=1234&tls=false", http.StatusNotFound, "not found"},
	} {
		code, body := vsock(tc.name, tc.query)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("vsock %s?%s: %d %s, want %d and %q", tc.name, tc.query, code, body, tc.code, tc.msg)
		}
	}
	vmi.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(true)
	attached := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "attached", Namespace: ns}, Spec: vmi.Spec}
	if err := c.Create(ctx, attached); err != nil {
		t.Fatal(err)
	}
	if code, body := vsock("attached", "port=1234&tls=false"); code != http.StatusConflict || !strings.Contains(body, "not running") {
		t.Errorf("vsock to a VMI that does not run: %d %s", code, body)
	}
}
