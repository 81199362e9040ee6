package virtapi

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// portForwardResources are the port-forwarding subresources (verb get),
// as KubeVirt names them in RBAC and discovery.
var portForwardResources = []string{"virtualmachineinstances/portforward", "virtualmachines/portforward"}

// portForwardRoutes serves KubeVirt's port forwarding: GET
// .../virtualmachineinstances/NAME/portforward/PORT[/PROTOCOL] (and the
// same under virtualmachines/NAME, for the VM's instance), upgraded to a
// websocket whose binary messages carry the raw bytes of one TCP
// connection to that port of the guest (virtctl port-forward, ssh, scp).
func (s *Server) portForwardRoutes(mux *http.ServeMux, ns string) {
	for _, kind := range []string{"virtualmachineinstances", "virtualmachines"} {
		h := s.authz(kind, "portforward", "get", s.portForward)
		mux.HandleFunc("GET "+ns+kind+"/{name}/portforward/{port}", h)
		mux.HandleFunc("GET "+ns+kind+"/{name}/portforward/{port}/{protocol}", h)
	}
}

// portForward checks the request, then bridges the caller's websocket to
// the one virt-handler on the VMI's node serves for the connection it
// makes to the guest from the launcher pod's network namespace.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request, u userInfo) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("port %q: want a number from 1 to 65535", r.PathValue("port")))
		return
	}
	protocol := r.PathValue("protocol")
	if protocol == "" {
		protocol = "tcp"
	}
	if protocol != "tcp" {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("protocol %q: kubevmm forwards tcp only", protocol))
		return
	}
	vmi, err := s.getVMI(r.Context(), ns, name)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !vmi.IsRunning() {
		writeErr(w, conflict("VMI is not running"))
		return
	}
	if c := vmi.GetCondition(v1.VirtualMachineInstancePaused); c != nil && c.Status == "True" {
		writeErr(w, conflict("VMI is paused"))
		return
	}
	what := fmt.Sprintf("port %d", port)
	if !s.proxyStream(w, r, vmi, fmt.Sprintf("portforward/%d/%s", port, protocol), what) {
		return
	}
	s.Log.Info("port forward ended", "vmi", ns+"/"+name, "port", port, "user", u.Name)
}

// vsock serves KubeVirt's GET .../virtualmachineinstances/NAME/vsock
// ?port=N&tls=false: a websocket whose binary messages carry one
// connection to the guest's vsock port N, which virt-handler opens through
// the VM's vsock device. As in KubeVirt, a VMI without autoattachVSOCK is
// refused (its guest's vsock device is there for the guest agent alone).
func (s *Server) vsock(w http.ResponseWriter, r *http.Request, u userInfo) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	port, err := vmispec.VsockPort(r.URL.Query())
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	vmi, err := s.getVMI(r.Context(), ns, name)
	if err != nil {
		writeErr(w, err)
		return
	}
	if a := vmi.Spec.Domain.Devices.AutoattachVSOCK; a == nil || !*a {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "VSOCK is not attached: the VMI needs spec.domain.devices.autoattachVSOCK: true")
		return
	}
	if !vmi.IsRunning() {
		writeErr(w, conflict("VMI is not running"))
		return
	}
	if c := vmi.GetCondition(v1.VirtualMachineInstancePaused); c != nil && c.Status == "True" {
		writeErr(w, conflict("VMI is paused"))
		return
	}
	if !s.proxyStream(w, r, vmi, fmt.Sprintf("vsock?port=%d&tls=false", port), fmt.Sprintf("vsock port %d", port)) {
		return
	}
	s.Log.Info("vsock stream ended", "vmi", ns+"/"+name, "port", port, "user", u.Name)
}

// proxyStream bridges the caller's websocket to the one virt-handler
// serves at sub (console, portforward/...) for the VMI: virtctl -> API
// server -> virt-api -> virt-handler -> launcher pod, as in KubeVirt. It
// reports whether the stream ran (else the error has been answered).
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, vmi *v1.VirtualMachineInstance, sub, what string) bool {
	base, err := s.handlerURL(r.Context(), vmi.Status.NodeName)
	if err != nil {
		writeErr(w, &opError{code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable, msg: err.Error()})
		return false
	}
	d := websocket.Dialer{TLSClientConfig: s.HandlerTLS, Subprotocols: []string{v1.ConsoleSubprotocol}, HandshakeTimeout: admissionTimeout}
	url := "wss" + strings.TrimPrefix(base, "https") + fmt.Sprintf("/v1/namespaces/%s/virtualmachineinstances/%s/%s", vmi.Namespace, vmi.Name, sub)
	back, resp, err := d.DialContext(r.Context(), url, nil)
	if err != nil {
		msg := err.Error()
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			msg = strings.TrimSpace(string(b))
		}
		writeErr(w, &opError{code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable, msg: what + ": " + msg})
		return false
	}
	front, err := clientUpgrader.Upgrade(w, r, nil)
	if err != nil {
		back.Close()
		return false
	}
	bridge(front, back)
	return true
}
