// Package kubemacpool is kubemacpool's webhook server and controller: a
// mutating webhook that gives every VirtualMachine interface without a
// macAddress one from the MAC range (package net/macpool), and a watch of
// the VMs and of the range's ConfigMap that keeps the pool true.
//
// Its contract with the deployment (operator/network/install): HTTPS on
// one port, serving certificate tls.crt/tls.key in a directory read at
// each TLS handshake (a rotated Secret takes effect without a restart),
//
//	POST /mutate-virtualmachines  AdmissionReview v1, kubevirt.io/v1 virtualmachines CREATE, UPDATE,
//	                              from the API server only (its front-proxy client certificate; 401/403 else)
//	GET  /readyz                  200 once the pool was rebuilt from the VMs, a range is configured and the certificate loads
//	GET  /metrics                 Prometheus: kmp_mac_collisions{mac}, to a token allowed to GET /metrics
//	                              (api/securemetrics; 401/403 else): the colliding MACs are the VMs' owners' business
//
// the webhook configuration MutatingWebhook makes, and the API access
// ClusterRoleRules and RoleRules grant.
//
// One replica, its pool in memory: at start it lists every VM (the watch's
// initial list) and holds their MACs before it is ready; afterwards the
// watch makes the pool hold what each stored VM holds and frees a deleted
// VM's. Upstream's consistency trick (a "waiting" annotation on each VM
// until the API server stored it) is not needed for that; what it costs:
// MACs given to a VM that the API server then does not store (another
// webhook refused it) stay held until that VM name is stored or kubemacpool
// restarts. Two replicas would each hand out MACs from their own pool:
// the Deployment runs one and is replaced, not rolled (Recreate).
package kubemacpool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/admission"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/net/macpool"
)

// The paths served.
const (
	PathMutateVM = "/mutate-virtualmachines"
	PathReady    = "/readyz"
)

// Server answers the admission reviews from Pool.
type Server struct {
	Pool    *macpool.Pool
	CertDir string // tls.crt and tls.key
	// Callers tells the API server's reviews from anyone else's: every
	// review allocates and holds MACs, and a pod sending its own would
	// drain the pool.
	Callers frontproxy.Callers
	// MetricsGuard checks a scraper's token (securemetrics.Guard); nil:
	// no /metrics.
	MetricsGuard func(http.Handler) http.Handler
	Log          *slog.Logger
	// ReservationTTL is how long MACs given to a VM not stored yet stay
	// held (DefaultReservationTTL if 0).
	ReservationTTL time.Duration

	// mu orders admissions: a dry run gives back what it took before the
	// next one allocates.
	mu    sync.Mutex
	ready atomic.Bool
}

// DefaultReservationTTL is how long reserved MACs wait for their VM: an
// API server stores an admitted object within seconds, and a minute
// leaves room for a slow one.
const DefaultReservationTTL = time.Minute

func (s *Server) reservationTTL() time.Duration {
	if s.ReservationTTL > 0 {
		return s.ReservationTTL
	}
	return DefaultReservationTTL
}

// expireReservations frees expired reservations (macpool.Pool.Expire)
// until ctx ends, a few times per ReservationTTL.
func (s *Server) expireReservations(ctx context.Context) {
	t := time.NewTicker(max(s.reservationTTL()/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if gone := s.Pool.Expire(now); len(gone) > 0 {
				s.Log.Info("released the MACs of VMs never stored", "owners", len(gone), "first", gone[0])
			}
		}
	}
}

// SetReady says the pool is rebuilt and has a range: admissions are
// answered from then on.
func (s *Server) SetReady() { s.ready.Store(true) }

// Handler serves the paths of the contract, and GET /metrics: the Go
// runtime's and the process's metrics and upstream's kmp_mac_collisions,
// on the same port, behind MetricsGuard.
func (s *Server) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collisions{s.Pool}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	securemetrics.Route(mux, s.MetricsGuard, reg)
	mux.Handle("POST "+PathMutateVM, frontproxy.OnlyAPIServer(s.Callers, admission.Handler(func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return s.Admit(req)
	})))
	mux.HandleFunc("GET "+PathReady, func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "the MAC pool is not rebuilt from the VMs yet, or no MAC range is configured", http.StatusServiceUnavailable)
			return
		}
		if _, err := admission.Certificate(s.CertDir); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	return mux
}

// collisionsDesc is upstream's gauge. Upstream counts the running VMIs
// and pods sharing a MAC; here it is the VMs whose interfaces ask for it
// (a VM asks for its MAC whether it runs or not), and only MACs that more
// than one VM asks for are reported.
var collisionsDesc = prometheus.NewDesc("kmp_mac_collisions",
	"Count of VMs sharing the same MAC address (collision when > 1)", []string{"mac"}, nil)

type collisions struct{ pool *macpool.Pool }

func (c collisions) Describe(ch chan<- *prometheus.Desc) { ch <- collisionsDesc }

func (c collisions) Collect(ch chan<- prometheus.Metric) {
	for m, n := range c.pool.Collisions() {
		ch <- prometheus.MustNewConstMetric(collisionsDesc, prometheus.GaugeValue, float64(n), m.String())
	}
}

// Serve serves Handler over HTTPS on ln until ctx ends (admission.ServeTLS).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Callers == nil {
		return errors.New("kubemacpool: no Callers: the webhook would hand out MACs to anyone")
	}
	s.Log.Info("serving", "addr", ln.Addr().String(), "certDir", s.CertDir)
	return admission.ServeTLS(ctx, ln, s.Handler(), s.CertDir)
}

// Admit fills every interface's missing macAddress: on an update with the
// MAC the interface of that name had, else the pool's next free one. It
// refuses an invalid MAC and one MAC on two interfaces, naming each field.
// A MAC another VM already has is admitted, as upstream kubemacpool does
// since it allows collisions: the VM is held as one more owner, the
// response warns naming the other VMs, and kmp_mac_collisions counts it.
func (s *Server) Admit(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allow()
	}
	if !s.ready.Load() {
		return admission.Refuse(http.StatusServiceUnavailable, "kubemacpool is not ready: the MAC pool is not rebuilt from the VMs yet")
	}
	vm := &v1.VirtualMachine{}
	if resp, ok := admission.DecodeToMutate(req.Object.Raw, vm); !ok {
		return resp
	}
	// A VM being deleted is updated to take its finalizers off.
	if vm.DeletionTimestamp != nil || vm.Spec.Template == nil {
		return admission.Allow()
	}
	ifaces := vm.Spec.Template.Spec.Domain.Devices.Interfaces
	if errs := macpool.CheckInterfaces(ifaces); len(errs) > 0 {
		return admission.Deny(interfaceErrors(ifaces, errs))
	}
	oldMACs := oldInterfaceMACs(req)
	name := req.Name
	if name == "" {
		name = vm.Name
	}
	owner := macpool.Owner(req.Namespace, name)
	if name == "" {
		// generateName: the VM is named when stored; the watch's VM
		// takes its MACs over.
		owner = macpool.Owner(req.Namespace, "?"+string(req.UID))
	}
	dryRun := req.DryRun != nil && *req.DryRun

	asked := map[macpool.MAC]bool{}
	for _, iface := range ifaces {
		if m, err := macpool.ParseMAC(iface.MacAddress); err == nil {
			asked[m] = true
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.Pool.Held(owner)
	var patch []admission.PatchOp
	var warnings []string
	for i, iface := range ifaces {
		path := fmt.Sprintf("/spec/template/spec/domain/devices/interfaces/%d/macAddress", i)
		want := iface.MacAddress
		if want == "" && oldMACs[iface.Name] != "" {
			// Not when another interface now asks for it (one MAC on
			// two interfaces is what CheckInterfaces refuses), nor an
			// old MAC that is invalid (stored without kubemacpool).
			if m, err := macpool.ParseMAC(oldMACs[iface.Name]); err == nil && !asked[m] {
				want = oldMACs[iface.Name]
			}
		}
		if want == "" {
			m, err := s.Pool.Allocate(owner)
			if err != nil {
				s.Pool.Set(owner, before)
				return admission.Refuse(http.StatusInternalServerError,
					fmt.Sprintf("spec.template.spec.domain.devices.interfaces[%d].macAddress (interface %s): %v", i, iface.Name, err))
			}
			patch = append(patch, admission.PatchOp{Op: "add", Path: path, Value: m.String()})
			continue
		}
		if iface.MacAddress == "" {
			patch = append(patch, admission.PatchOp{Op: "add", Path: path, Value: want})
		}
		m, err := macpool.ParseMAC(want)
		if err != nil { // checked above: cannot happen
			continue
		}
		if others := s.Pool.Hold(owner, m); len(others) > 0 {
			warnings = append(warnings, fmt.Sprintf("spec.template.spec.domain.devices.interfaces[%d].macAddress (interface %s): MAC %s is already in use by %s",
				i, iface.Name, want, strings.Join(others, ", ")))
		}
	}
	if dryRun {
		s.Pool.Set(owner, before)
	} else {
		if name == "" {
			s.Pool.MarkPending(owner)
		}
		s.Pool.Reserve(owner, added(before, s.Pool.Held(owner)), time.Now().Add(s.reservationTTL()))
		if len(patch) > 0 || len(warnings) > 0 {
			s.Log.Info("admitted", "vm", owner, "op", req.Operation, "assigned", patch, "collisions", warnings)
		}
	}
	return admission.Patch(patch, warnings...)
}

// added are the MACs in after that are not in before.
func added(before, after []macpool.MAC) []macpool.MAC {
	var out []macpool.MAC
	for _, m := range after {
		if !slices.Contains(before, m) {
			out = append(out, m)
		}
	}
	return out
}

// oldInterfaceMACs are an update's old MACs by interface name.
func oldInterfaceMACs(req *admissionv1.AdmissionRequest) map[string]string {
	macs := map[string]string{}
	if req.Operation != admissionv1.Update {
		return macs
	}
	old := &v1.VirtualMachine{}
	if err := json.Unmarshal(req.OldObject.Raw, old); err == nil && old.Spec.Template != nil {
		for _, iface := range old.Spec.Template.Spec.Domain.Devices.Interfaces {
			macs[iface.Name] = iface.MacAddress
		}
	}
	return macs
}

// interfaceErrors names each refused MAC's field.
func interfaceErrors(ifaces []v1.Interface, errs []macpool.InterfaceError) field.ErrorList {
	p := field.NewPath("spec", "template", "spec", "domain", "devices", "interfaces")
	out := make(field.ErrorList, len(errs))
	for i, e := range errs {
		out[i] = field.Invalid(p.Index(e.Index).Child("macAddress"), ifaces[e.Index].MacAddress, fmt.Sprintf("interface %s: %v", e.Name, e.Err))
	}
	return out
}
