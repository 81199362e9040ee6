package virtapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// opError is an HTTP status and message for the caller.
type opError struct {
	code   int
	reason metav1.StatusReason
	msg    string
}

func (e *opError) Error() string { return e.msg }

func conflict(format string, a ...any) error {
	return &opError{code: http.StatusConflict, reason: metav1.StatusReasonConflict, msg: fmt.Sprintf(format, a...)}
}

func writeErr(w http.ResponseWriter, err error) {
	var oe *opError
	switch {
	case errors.As(err, &oe):
		writeStatus(w, oe.code, oe.reason, oe.msg)
	case apierrors.IsNotFound(err):
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, err.Error())
	default:
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
}

func (s *Server) vmOp(op string) func(http.ResponseWriter, *http.Request, userInfo) {
	return func(w http.ResponseWriter, r *http.Request, u userInfo) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		var err error
		switch op {
		case "pause", "unpause":
			err = s.lifecycle(r.Context(), ns, name, op)
		case "migrate":
			err = s.migrate(r.Context(), ns, name)
		default:
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error { return s.vmStateChange(r.Context(), ns, name, op) })
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		s.Log.Info("subresource", "op", op, "vm", ns+"/"+name, "user", u.Name)
		w.WriteHeader(http.StatusAccepted)
	}
}

func (s *Server) vmiOp(op string) func(http.ResponseWriter, *http.Request, userInfo) {
	return func(w http.ResponseWriter, r *http.Request, u userInfo) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		var err error
		if op == "migrate" {
			err = s.migrate(r.Context(), ns, name)
		} else {
			err = s.lifecycle(r.Context(), ns, name, op)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		s.Log.Info("subresource", "op", op, "vmi", ns+"/"+name, "user", u.Name)
		w.WriteHeader(http.StatusAccepted)
	}
}

// vmStateChange implements start, stop and restart as KubeVirt does: run
// strategies that say it in the spec get their spec flipped (Halted <->
// Always), the others get a state change request for virt-controller.
func (s *Server) vmStateChange(ctx context.Context, ns, name, op string) error {
	vm := &v1.VirtualMachine{}
	if err := s.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm); err != nil {
		return err
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return conflict("%v", err)
	}
	var vmi *v1.VirtualMachineInstance
	if got, err := s.getVMI(ctx, ns, name); err == nil {
		vmi = got
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	running := vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	pending := len(vm.Status.StateChangeRequests) > 0

	setSpec := func(run bool) error { return s.setRunning(ctx, vm, run) }
	request := func(reqs ...v1.VirtualMachineStateChangeRequest) error {
		orig := vm.DeepCopy()
		vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, reqs...)
		return s.Client.Status().Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
	stopReq := func() v1.VirtualMachineStateChangeRequest {
		return v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: ptr.To(vmi.UID)}
	}

	switch op {
	case "start":
		if running {
			return conflict("VM is already running")
		}
		if pending {
			return conflict("VM has a pending state change request; try again")
		}
		switch strategy {
		case v1.RunStrategyHalted:
			return setSpec(true)
		case v1.RunStrategyManual, v1.RunStrategyRerunOnFailure:
			return request(v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
		default:
			return conflict("%s does not support manual start requests", strategy)
		}
	case "stop":
		switch strategy {
		case v1.RunStrategyHalted:
			if !running {
				return conflict("VM is not running")
			}
			return nil // virt-controller is stopping it already
		case v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure:
			return setSpec(false)
		default:
			if !running {
				return conflict("VM is not running")
			}
			return request(stopReq())
		}
	case "restart":
		if strategy == v1.RunStrategyHalted {
			return conflict("%s does not support manual restart requests", strategy)
		}
		if !running {
			return conflict("VM is not running")
		}
		if pending {
			return conflict("VM has a pending state change request; try again")
		}
		return request(stopReq(), v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	}
	return fmt.Errorf("unknown operation %q", op)
}

// setRunning flips the VM's spec: spec.running if it uses that, else the
// run strategy (Always or Halted).
func (s *Server) setRunning(ctx context.Context, vm *v1.VirtualMachine, run bool) error {
	orig := vm.DeepCopy()
	switch {
	case vm.Spec.Running != nil:
		vm.Spec.Running = ptr.To(run)
	case run:
		vm.Spec.RunStrategy = ptr.To(v1.RunStrategyAlways)
	default:
		vm.Spec.RunStrategy = ptr.To(v1.RunStrategyHalted)
	}
	return s.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// migrate creates a VirtualMachineInstanceMigration, as `virtctl migrate`
// does in KubeVirt; the migration controller carries it out.
func (s *Server) migrate(ctx context.Context, ns, name string) error {
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if !vmi.IsRunning() {
		return conflict("VMI is not running")
	}
	m := &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubevirt-migrate-vm-", Namespace: ns},
		Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: name},
	}
	return s.Client.Create(ctx, m)
}

// lifecycle asks the virt-handler of the VMI's node to pause, unpause,
// reset or soft-reboot it.
func (s *Server) lifecycle(ctx context.Context, ns, name, op string) error {
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return err
	}
	if !vmi.IsRunning() {
		return conflict("VMI is not running")
	}
	paused := false
	if c := vmi.GetCondition(v1.VirtualMachineInstancePaused); c != nil && c.Status == "True" {
		paused = true
	}
	switch {
	case op == "pause" && paused:
		return conflict("VMI is already paused")
	case op == "unpause" && !paused:
		return conflict("VMI is not paused")
	case op == "softreboot" && paused:
		// A paused guest cannot answer the power button (KubeVirt's
		// check too); a reset works on a paused VMI.
		return conflict("VMI is paused")
	}
	base, err := s.handlerURL(ctx, vmi.Status.NodeName)
	if err != nil {
		return &opError{code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable, msg: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/v1/namespaces/%s/virtualmachineinstances/%s/%s", base, ns, name, op), nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.HandlerTLS}, Timeout: admissionTimeout}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("virt-handler on %s: %w", vmi.Status.NodeName, err)
	}
	defer func() { _ = resp.Body.Close() }() // read side: nothing to lose
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &opError{code: resp.StatusCode, reason: metav1.StatusReasonConflict, msg: strings.TrimSpace(string(b))}
	}
	return nil
}

var clientUpgrader = websocket.Upgrader{
	Subprotocols: []string{v1.ConsoleSubprotocol},
	// Requests come through the API server, authenticated above.
	CheckOrigin: func(*http.Request) bool { return true },
}

// console bridges the caller's websocket to the one virt-handler serves
// for the VMI's serial console (see proxyStream).
func (s *Server) console(w http.ResponseWriter, r *http.Request, u userInfo) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	vmi, err := s.getVMI(r.Context(), ns, name)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !vmi.IsRunning() {
		writeErr(w, conflict("VMI is not running"))
		return
	}
	s.Log.Info("console", "vmi", ns+"/"+name, "user", u.Name)
	s.proxyStream(w, r, vmi, "console", "console")
}

// bridge copies messages between two websockets until one ends.
func bridge(a, b *websocket.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src *websocket.Conn) {
		defer func() { done <- struct{}{} }()
		for {
			t, data, err := src.ReadMessage()
			if err != nil {
				return
			}
			if err := dst.WriteMessage(t, data); err != nil {
				return
			}
		}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	a.Close()
	b.Close()
}
