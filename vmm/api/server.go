package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/kubevmm/kubevmm/vmm/unixsock"
)

// maxBody bounds request bodies; every request here is a few hundred bytes.
const maxBody = 64 << 10

// Server serves the API for one VM.
type Server struct {
	vm  VM
	srv *http.Server
	l   net.Listener
}

// Listen creates the socket at path (replacing a stale one) and serves vm
// on it in the background until Close.
func Listen(path string, vm VM) (*Server, error) {
	l, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("control API socket: %w", err)
	}
	s := &Server{vm: vm, l: l}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	// Serve returns ErrServerClosed once Close runs; before that it only
	// fails with the listener, which Close tears down anyway.
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	os.Remove(s.l.Addr().String())
	return err
}

// Handler returns the HTTP routes (for tests and embedding).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/vm", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, s.vm.Info())
	})
	mux.HandleFunc("PUT /v1/vm/pause", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.Pause())
	})
	mux.HandleFunc("PUT /v1/vm/resume", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.Resume())
	})
	mux.HandleFunc("PUT /v1/vm/stop", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.Stop())
	})
	mux.HandleFunc("PUT /v1/vm/powerbutton", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.PowerButton())
	})
	mux.HandleFunc("PUT /v1/vm/reset", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.Reset())
	})
	mux.HandleFunc("PUT /v1/vm/softreboot", s.viaAgent(GuestAgentVM.Reboot, s.vm.SoftReboot))
	mux.HandleFunc("PUT /v1/vm/shutdown", s.viaAgent(GuestAgentVM.Shutdown, s.vm.PowerButton))
	mux.HandleFunc("PUT /v1/vm/freeze", func(w http.ResponseWriter, r *http.Request) {
		var req FreezeRequest
		if !decode(w, r, &req) {
			return
		}
		if req.UnfreezeTimeout < 0 {
			fail(w, fmt.Errorf("%w: unfreeze_timeout_s must not be negative", ErrBadRequest))
			return
		}
		g, ok := s.vm.(GuestAgentVM)
		if !ok {
			fail(w, errNoAgent)
			return
		}
		result(w, nil, g.Freeze(req))
	})
	mux.HandleFunc("PUT /v1/vm/unfreeze", func(w http.ResponseWriter, r *http.Request) {
		g, ok := s.vm.(GuestAgentVM)
		if !ok {
			fail(w, errNoAgent)
			return
		}
		result(w, nil, g.Unfreeze())
	})
	mux.HandleFunc("PUT /v1/vm/snapshot", func(w http.ResponseWriter, r *http.Request) {
		var req SnapshotRequest
		if !decode(w, r, &req) {
			return
		}
		if req.Dir == "" {
			fail(w, fmt.Errorf("%w: snapshot needs \"dir\"", ErrBadRequest))
			return
		}
		res, err := s.vm.Snapshot(req)
		result(w, res, err)
	})
	mux.HandleFunc("PUT /v1/vm/migrate", func(w http.ResponseWriter, r *http.Request) {
		var req MigrateRequest
		if !decode(w, r, &req) {
			return
		}
		network, _, err := ParseAddress(req.To)
		if err != nil {
			fail(w, fmt.Errorf("%w: %v", ErrBadRequest, err))
			return
		}
		if req.TLS != nil && network != "tcp" {
			fail(w, fmt.Errorf("%w: TLS is for tcp: targets; a unix socket stays local", ErrBadRequest))
			return
		}
		if err := s.vm.Migrate(req); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("GET /v1/vm/migration", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, s.vm.Migration())
	})
	mux.HandleFunc("DELETE /v1/vm/migration", func(w http.ResponseWriter, r *http.Request) {
		result(w, nil, s.vm.CancelMigration())
	})
	mux.HandleFunc("GET /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, s.vm.Metrics())
	})
	s.volumeRoutes(mux)
	return mux
}

// viaAgent serves shutdown and softreboot: a VM whose owner talks to its
// guest agent decides how (agent), else the ACPI way (acpi) is taken.
func (s *Server) viaAgent(agent func(GuestAgentVM) (ShutdownResult, error), acpi func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if g, ok := s.vm.(GuestAgentVM); ok {
			res, err := agent(g)
			result(w, res, err)
			return
		}
		result(w, ShutdownResult{Via: ShutdownViaACPI}, acpi())
	}
}

var errNoAgent = fmt.Errorf("%w: this VMM talks to no guest agent", ErrConflict)

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, fmt.Errorf("%w: %v", ErrBadRequest, err))
		return false
	}
	return true
}

func result(w http.ResponseWriter, v any, err error) {
	switch {
	case err != nil:
		fail(w, err)
	case v == nil:
		w.WriteHeader(http.StatusNoContent)
	default:
		reply(w, http.StatusOK, v)
	}
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest):
		code = http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		code = http.StatusConflict
	}
	reply(w, code, map[string]string{"error": err.Error()})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is sent: a client gone mid-body cannot be told more.
	_ = json.NewEncoder(w).Encode(v)
}

// ParseAddress splits a migration address "tcp:HOST:PORT" or "unix:PATH"
// into the network and address net.Dial/Listen take.
func ParseAddress(s string) (network, addr string, err error) {
	switch {
	case len(s) > 4 && s[:4] == "tcp:":
		if _, _, err := net.SplitHostPort(s[4:]); err != nil {
			return "", "", fmt.Errorf("address %q: %v", s, err)
		}
		return "tcp", s[4:], nil
	case len(s) > 5 && s[:5] == "unix:":
		return "unix", s[5:], nil
	}
	return "", "", fmt.Errorf("address %q: want tcp:HOST:PORT or unix:PATH", s)
}

// ListenAddress listens on a migration address (see ParseAddress); a unix
// socket left by a dead process is replaced, a live one is not.
func ListenAddress(s string) (net.Listener, error) {
	network, addr, err := ParseAddress(s)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		return unixsock.Listen(addr)
	}
	return net.Listen(network, addr)
}
