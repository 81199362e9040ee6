package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
)

// The volume routes in front of a real VM with a SCSI controller: what
// `vmm volume` and virt-launcher send, and what they get for mistakes.
func TestVolumeRoutes(t *testing.T) {
	v := runnertest.SpinningSCSI(t)
	c := rawClient(v.Socket)
	dir := t.TempDir()
	img := filepath.Join(dir, "hot.raw")
	require.NoError(t, os.WriteFile(img, make([]byte, 4<<20), 0o644))
	body := func(r api.VolumeRequest) string {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return string(b)
	}
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		want                     string // in the error, or the reply
	}{
		{"empty list", http.MethodGet, "/v1/vm/volumes", "", http.StatusOK, `[]`},
		{"attach", http.MethodPut, "/v1/vm/volumes", body(api.VolumeRequest{Name: "hot", Path: img}), http.StatusOK,
			`"name":"hot","path":"` + img + `","format":"raw","target":0,"size_bytes":4194304`},
		{"listed", http.MethodGet, "/v1/vm/volumes", "", http.StatusOK, `"target":0`},
		{"name in use", http.MethodPut, "/v1/vm/volumes", body(api.VolumeRequest{Name: "hot", Path: img}), http.StatusBadRequest, `volume refused`},
		{"no name", http.MethodPut, "/v1/vm/volumes", body(api.VolumeRequest{Path: img}), http.StatusBadRequest, `needs "name" and "path"`},
		{"unknown format", http.MethodPut, "/v1/vm/volumes", body(api.VolumeRequest{Name: "x", Path: img, Format: "vmdk"}), http.StatusBadRequest, `unknown image format "vmdk"`},
		{"missing image", http.MethodPut, "/v1/vm/volumes", body(api.VolumeRequest{Name: "x", Path: img + ".nope"}), http.StatusBadRequest, `no such file`},
		{"unknown field", http.MethodPut, "/v1/vm/volumes", `{"name":"x","path":"p","bus":"scsi"}`, http.StatusBadRequest, `unknown field "bus"`},
		{"detach", http.MethodDelete, "/v1/vm/volumes/hot", "", http.StatusOK, `"name":"hot"`},
		{"detach again", http.MethodDelete, "/v1/vm/volumes/hot", "", http.StatusConflict, `no such volume`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := c.do(t, tc.method, tc.path, tc.body)
			assert.Equal(t, tc.code, code, got)
			if code >= 300 {
				errorReply(t, got, tc.want)
			} else {
				assert.Contains(t, got, tc.want)
			}
		})
	}

	// the client, as the CLI and the launcher use it
	ctx := context.Background()
	vol, err := v.Client.AttachVolume(ctx, api.VolumeRequest{Name: "ro", Path: img, ReadOnly: true})
	require.NoError(t, err)
	assert.Equal(t, api.Volume{Name: "ro", Path: img, Format: "raw", ReadOnly: true, Target: 0, SizeBytes: 4 << 20}, vol)
	vols, err := v.Client.Volumes(ctx)
	require.NoError(t, err)
	assert.Equal(t, []api.Volume{vol}, vols)
	_, err = v.Client.DetachVolume(ctx, "ro")
	require.NoError(t, err)
}

func TestVolumesNeedAController(t *testing.T) {
	v := runnertest.Spinning(t)
	_, err := v.Client.AttachVolume(context.Background(), api.VolumeRequest{Name: "x", Path: "/dev/null"})
	var e *api.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusConflict, e.Status)
	assert.Contains(t, e.Msg, "no SCSI controller")
}
