package virtapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// The VMI subresources that talk to the guest agent, as KubeVirt serves
// them: reads (GET, RBAC verb get) answered with KubeVirt's types, and
// freeze/unfreeze (PUT, update). A VMI whose agent is not connected is
// a conflict, with KubeVirt's message.
var (
	guestAgentReads  = []string{"guestosinfo", "userlist", "filesystemlist"}
	guestAgentWrites = []string{"freeze", "unfreeze"}
)

const errAgentNotConnected = "VMI does not have guest agent connected"

// guestAgentRoutes registers them under ns (".../namespaces/{namespace}/").
func (s *Server) guestAgentRoutes(mux *http.ServeMux, ns string) {
	for _, op := range guestAgentReads {
		mux.HandleFunc("GET "+ns+"virtualmachineinstances/{name}/"+op, s.authz("virtualmachineinstances", op, "get", s.guestAgentOp(http.MethodGet, op)))
	}
	for _, op := range guestAgentWrites {
		mux.HandleFunc("PUT "+ns+"virtualmachineinstances/{name}/"+op, s.authz("virtualmachineinstances", op, "update", s.guestAgentOp(http.MethodPut, op)))
	}
}

// guestAgentResources are their discovery entries.
func guestAgentResources(add func(name string, verbs ...string)) {
	for _, op := range guestAgentReads {
		add("virtualmachineinstances/"+op, "get")
	}
	for _, op := range guestAgentWrites {
		add("virtualmachineinstances/"+op, "update")
	}
}

// guestAgentOp asks the virt-handler of the VMI's node, which asks the
// launcher, which has the agent's answers; the reply is passed on.
func (s *Server) guestAgentOp(method, op string) func(http.ResponseWriter, *http.Request, userInfo) {
	return func(w http.ResponseWriter, r *http.Request, u userInfo) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		var body []byte
		if op == "freeze" {
			var f v1.FreezeUnfreezeTimeout
			if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&f); err != nil {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("freeze: the body is not a FreezeUnfreezeTimeout: %v", err))
				return
			}
			if f.UnfreezeTimeout == nil {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "freeze: unfreezeTimeout is required")
				return
			}
			if f.UnfreezeTimeout.Duration < 0 {
				writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "freeze: unfreezeTimeout must not be negative")
				return
			}
			body, _ = json.Marshal(f) // a decoded struct: it encodes
		}
		out, err := s.askHandler(r.Context(), ns, name, method, op, body)
		if err != nil {
			writeErr(w, err)
			return
		}
		if method == http.MethodPut {
			s.Log.Info("subresource", "op", op, "vmi", ns+"/"+name, "user", u.Name)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// A client gone mid-body cannot be told more.
		_, _ = w.Write(out)
	}
}

// askHandler sends one request about a running VMI with a connected
// agent to the virt-handler of its node.
func (s *Server) askHandler(ctx context.Context, ns, name, method, op string, body []byte) ([]byte, error) {
	vmi, err := s.getVMI(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if !vmi.IsRunning() {
		return nil, conflict("VMI is not running")
	}
	if c := vmi.GetCondition(v1.VirtualMachineInstanceAgentConnected); c == nil || c.Status != corev1.ConditionTrue {
		return nil, conflict("%s", errAgentNotConnected)
	}
	base, err := s.handlerURL(ctx, vmi.Status.NodeName)
	if err != nil {
		return nil, &opError{code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable, msg: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s/v1/namespaces/%s/virtualmachineinstances/%s/%s", base, ns, name, op), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.HandlerTLS}, Timeout: admissionTimeout}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("virt-handler on %s: %w", vmi.Status.NodeName, err)
	}
	defer func() { _ = resp.Body.Close() }() // read side: nothing to lose
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("virt-handler on %s: %w", vmi.Status.NodeName, err)
	}
	if resp.StatusCode >= 300 {
		reason := metav1.StatusReasonConflict
		if resp.StatusCode >= 500 {
			reason = metav1.StatusReasonInternalError
		}
		return nil, &opError{code: resp.StatusCode, reason: reason, msg: strings.TrimSpace(string(b))}
	}
	return b, nil
}
