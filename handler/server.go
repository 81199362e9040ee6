package handler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// Port is where virt-handler serves virt-api (KubeVirt's 8186).
const Port = 8186

// VirtAPIClientName is the common name virt-api's client certificate has;
// only it may use the handler's server.
const VirtAPIClientName = "kubevirt.io:system:client:virt-api"

// Server is virt-handler's API for virt-api: the operations that need the
// node (pause, unpause, reset, soft reboot, the serial console, port
// forwarding, what the guest agent says, freeze and unfreeze), for VMIs on
// this node.
type Server struct {
	Client   client.Client // reads VMIs (the manager's cache)
	NodeName string
	PodsDir  string // the kubelet's pods directory (see socketDir)
	Kick     chan<- event.GenericEvent
	Log      logr.Logger
}

// Handler is the HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	base := "/v1/namespaces/{namespace}/virtualmachineinstances/{name}/"
	mux.HandleFunc("PUT "+base+"pause", s.lifecycle("pause"))
	mux.HandleFunc("PUT "+base+"unpause", s.lifecycle("unpause"))
	mux.HandleFunc("PUT "+base+"reset", s.lifecycle("reset"))
	mux.HandleFunc("PUT "+base+"softreboot", s.lifecycle("softreboot"))
	mux.HandleFunc("GET "+base+"console", s.console)
	mux.HandleFunc("GET "+base+"portforward/{port}/{protocol}", s.portForward)
	mux.HandleFunc("GET "+base+"vsock", s.vsock)
	mux.HandleFunc("GET "+base+"guestosinfo", s.guestAgentRoute(guestAgentInfo))
	mux.HandleFunc("GET "+base+"userlist", s.guestAgentRoute(userList))
	mux.HandleFunc("GET "+base+"filesystemlist", s.guestAgentRoute(filesystemList))
	mux.HandleFunc("PUT "+base+"freeze", s.freeze)
	mux.HandleFunc("PUT "+base+"unfreeze", s.unfreeze)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return mux
}

// launcher finds the running VMI the request names, on this node, and its
// active launcher (after a migration, the target's); on failure, the HTTP
// status to answer with.
func (s *Server) launcher(r *http.Request) (*v1.VirtualMachineInstance, launcherConn, int, error) {
	vmi, code, err := s.vmi(r)
	if err != nil {
		return nil, launcherConn{}, code, err
	}
	pod, err := activeLauncherPod(r.Context(), s.Client, s.NodeName, vmi)
	if err != nil {
		return nil, launcherConn{}, http.StatusInternalServerError, err
	}
	return vmi, podLauncher(s.PodsDir, pod), 0, nil
}

func (s *Server) vmi(r *http.Request) (*v1.VirtualMachineInstance, int, error) {
	vmi := &v1.VirtualMachineInstance{}
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if err := s.Client.Get(r.Context(), key, vmi); err != nil {
		return nil, http.StatusNotFound, fmt.Errorf("VMI %s: %w", key, err)
	}
	if vmi.Status.NodeName != s.NodeName {
		return nil, http.StatusConflict, fmt.Errorf("VMI %s does not run on node %s", key, s.NodeName)
	}
	if !vmi.IsRunning() {
		return nil, http.StatusConflict, fmt.Errorf("VMI %s is not running (phase %s)", key, vmi.Status.Phase)
	}
	return vmi, 0, nil
}

func (s *Server) lifecycle(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vmi, l, code, err := s.launcher(r)
		if err != nil {
			http.Error(w, err.Error(), code)
			return
		}
		c := l.client()
		ctx, cancel := context.WithTimeout(r.Context(), launcherQueryTimeout)
		defer cancel()
		switch op {
		case "pause":
			err = c.Pause(ctx)
		case "unpause":
			err = c.Resume(ctx)
		case "reset":
			err = c.Reset(ctx)
		case "softreboot":
			// As KubeVirt: through the guest agent when one is connected
			// (guest-shutdown mode=reboot; the guest's reboot boots it
			// again in the VMI), else the ACPI way, the power button and
			// a new boot when the guest powers off. The launcher, which
			// talks to the agent, picks and says which.
			var res api.ShutdownResult
			if res, err = c.SoftReboot(ctx); err == nil {
				s.Log.Info("soft reboot", "vmi", vmi.Namespace+"/"+vmi.Name, "via", res.Via)
			}
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("%s VMI %s/%s: %v", op, vmi.Namespace, vmi.Name, err), http.StatusConflict)
			return
		}
		// The status follows from the launcher's state; reconcile now
		// rather than at the next poll.
		if s.Kick != nil {
			select {
			case s.Kick <- event.GenericEvent{Object: vmi}:
			default:
			}
		}
		w.WriteHeader(http.StatusOK)
	}
}

var upgrader = websocket.Upgrader{
	Subprotocols:    []string{v1.ConsoleSubprotocol},
	ReadBufferSize:  32 << 10,
	WriteBufferSize: 32 << 10,
	// Only virt-api, authenticated by its client certificate, gets here.
	CheckOrigin: func(*http.Request) bool { return true },
}

func (s *Server) console(w http.ResponseWriter, r *http.Request) {
	vmi, l, code, err := s.launcher(r)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), launcherQueryTimeout)
	conn, err := l.dir.dial(dctx, vmispec.ConsoleSocket)
	cancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("console of VMI %s/%s: %v", vmi.Namespace, vmi.Name, err), http.StatusServiceUnavailable)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		conn.Close()
		return
	}
	s.Log.Info("console attached", "vmi", vmi.Namespace+"/"+vmi.Name)
	BridgeWebsocket(ws, conn)
	s.Log.Info("console detached", "vmi", vmi.Namespace+"/"+vmi.Name)
}

// BridgeWebsocket copies between a websocket (binary messages) and a
// stream until either side ends, then closes both.
func BridgeWebsocket(ws *websocket.Conn, conn io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if _, err := conn.Write(data); err != nil {
				return
			}
		}
	}()
	<-done
	// Best effort: the client may be what ended the session.
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	ws.Close()
	_ = conn.Close() // the console socket, being torn down
}

// TLSFiles are a certificate, its key and the CA that signed its peers'.
type TLSFiles struct{ Cert, Key, CA string }

// ServerTLS is the handler's server TLS: its certificate, and client
// certificates required, signed by a CA of the bundle and named
// VirtAPIClientName.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if _, err := caPool(f.CA); err != nil {
		return nil, err
	}
	// Reloaded per handshake: a rotated secret takes effect without a
	// restart.
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		return &c, err
	}
	verify := func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || chains[0][0].Subject.CommonName != VirtAPIClientName {
			return errors.New("client certificate is not virt-api's")
		}
		return nil
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: getCert,
		// The CA bundle too, per handshake: during a rotation it holds the
		// new CA and the previous one, so clients with either leaf verify.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, err := caPool(f.CA)
			if err != nil {
				return nil, err
			}
			return &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
				GetCertificate: getCert, VerifyPeerCertificate: verify}, nil
		},
	}, nil
}

// caPool reads the CA bundle (the mounted Secret's ca.crt); callers read
// it per handshake, as the kubelet updates the file in place when the
// bundle changes. A session already established is not verified again:
// a migration stream or console that outlives a CA keeps going.
func caPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA bundle %s: no certificates", path)
	}
	return pool, nil
}
