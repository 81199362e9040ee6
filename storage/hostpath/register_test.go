package hostpath

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRegistration plays the kubelet's plugin watcher: it finds the
// registration socket, asks what is behind it, calls the endpoint it names
// (NodeGetInfo, as the kubelet does on registering) and reports success.
// When the driver stops, its sockets are gone.
func TestRegistration(t *testing.T) {
	d, _ := newDriver(t)
	root := t.TempDir()
	s := SocketsIn(root)
	assert.Equal(t, filepath.Join(root, "plugins_registry", "kubevirt.io.hostpath-provisioner-reg.sock"), s.Registration)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, d, s, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	reg := registerapi.NewRegistrationClient(dial(t, s.Registration))
	// Waits for the socket, which appears once Serve has started.
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
	assert.Equal(t, registerapi.CSIPlugin, info.GetType())
	assert.Equal(t, DriverName, info.GetName())
	assert.Equal(t, s.CSI, info.GetEndpoint())
	assert.Contains(t, info.GetSupportedVersions(), "1.0.0")

	ep := dial(t, info.GetEndpoint())
	pi, err := csi.NewIdentityClient(ep).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, DriverName, pi.GetName())
	ni, err := csi.NewNodeClient(ep).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, "node-a", ni.GetNodeId())
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)

	cancel()
	require.NoError(t, <-done)
	done <- nil // for the cleanup
	assert.NoFileExists(t, s.Registration)
	assert.NoFileExists(t, s.CSI)
}
