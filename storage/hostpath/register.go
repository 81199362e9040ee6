package hostpath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Sockets are where the driver listens under the kubelet's root
// directory: the CSI endpoint in plugins/<driver>/, and the registration
// socket in plugins_registry/, which the kubelet's plugin watcher finds.
type Sockets struct {
	CSI, Registration string
}

// SocketsIn are the sockets under kubeletRoot (the kubelet's --root-dir).
func SocketsIn(kubeletRoot string) Sockets {
	return Sockets{
		CSI:          filepath.Join(kubeletRoot, "plugins", DriverName, "csi.sock"),
		Registration: filepath.Join(kubeletRoot, "plugins_registry", DriverName+"-reg.sock"),
	}
}

// registration answers the kubelet's plugin watcher: what the driver is
// and where its CSI endpoint is. The kubelet then calls NodeGetInfo on the
// endpoint and serves the driver's volumes through it.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	endpoint string
	log      logr.Logger
}

// supportedVersions are the CSI versions the driver speaks, as the kubelet
// reads them.
var supportedVersions = []string{"1.0.0"}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: DriverName, Endpoint: r.endpoint, SupportedVersions: supportedVersions}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		r.log.Info("registered with the kubelet", "driver", DriverName)
	} else {
		// The kubelet retries when the socket is recreated; until then
		// the node cannot use the driver's volumes.
		r.log.Error(errors.New(s.GetError()), "the kubelet refused the registration", "driver", DriverName)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// listen makes a unix socket at path, replacing a stale one a previous
// process left.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return l, nil
}

// Serve serves the driver's CSI services on s.CSI and registers it with
// the kubelet on s.Registration (made after the endpoint listens, so the
// kubelet never finds a registration without its endpoint), until ctx
// ends; the sockets are then removed.
func Serve(ctx context.Context, d *Driver, s Sockets, log logr.Logger) error {
	csiL, err := listen(s.CSI)
	if err != nil {
		return err
	}
	csiSrv := grpc.NewServer()
	csi.RegisterIdentityServer(csiSrv, d)
	csi.RegisterControllerServer(csiSrv, d)
	csi.RegisterNodeServer(csiSrv, d)
	regL, err := listen(s.Registration)
	if err != nil {
		_ = csiL.Close()
		return err
	}
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, &registration{endpoint: s.CSI, log: log})
	errs := make(chan error, 2)
	go func() { errs <- csiSrv.Serve(csiL) }()
	go func() { errs <- regSrv.Serve(regL) }()
	log.Info("serving", "driver", DriverName, "endpoint", s.CSI, "registration", s.Registration)
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errs:
		err = fmt.Errorf("serving the CSI driver: %w", err)
	}
	// The registration socket goes first: the kubelet deregisters the
	// driver when it disappears.
	regSrv.Stop()
	csiSrv.Stop()
	_ = os.Remove(s.Registration)
	_ = os.Remove(s.CSI)
	return err
}
