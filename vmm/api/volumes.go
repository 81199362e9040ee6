package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// Hot-plugged volumes: disk images attached to and detached from a running
// VM's SCSI controller (a VMM started with one, `vmm run --scsi`; QEMU's
// virtio-scsi-pci), as KubeVirt's addvolume/removevolume do.
//
//	GET    /v1/vm/volumes         the attached volumes
//	PUT    /v1/vm/volumes         VolumeRequest: attach one (the guest sees a new disk)
//	DELETE /v1/vm/volumes/{name}  detach it (the guest sees it go; its image is flushed and closed)

// VolumeRequest attaches the image at Path under Name.
type VolumeRequest struct {
	// Name is unique on the VM (KubeVirt's volume name); it is also the
	// disk's SCSI serial number.
	Name     string `json:"name"`
	Path     string `json:"path"`
	Format   string `json:"format,omitempty"` // raw (default) or qcow2
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Volume is an attached volume and where the guest finds it: LUN 0 of
// SCSI target Target on the controller's channel 0.
type Volume struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	Format    string `json:"format"`
	ReadOnly  bool   `json:"read_only,omitempty"`
	Target    int    `json:"target"`
	SizeBytes uint64 `json:"size_bytes"`
}

// VolumeVM is a VM that takes hot-plugged volumes. The server answers 409
// for a VM without it.
type VolumeVM interface {
	AttachVolume(VolumeRequest) (Volume, error)
	// DetachVolume returns once no guest request uses the volume and its
	// image is flushed and closed.
	DetachVolume(name string) (Volume, error)
	Volumes() ([]Volume, error)
}

var errNoVolumes = fmt.Errorf("%w: this VM takes no hot-plugged volumes", ErrConflict)

func (s *Server) volumeRoutes(mux *http.ServeMux) {
	vvm := func(w http.ResponseWriter) VolumeVM {
		v, ok := s.vm.(VolumeVM)
		if !ok {
			fail(w, errNoVolumes)
		}
		return v
	}
	mux.HandleFunc("GET /v1/vm/volumes", func(w http.ResponseWriter, _ *http.Request) {
		if v := vvm(w); v != nil {
			vols, err := v.Volumes()
			if vols == nil {
				vols = []Volume{}
			}
			result(w, vols, err)
		}
	})
	mux.HandleFunc("PUT /v1/vm/volumes", func(w http.ResponseWriter, r *http.Request) {
		var req VolumeRequest
		if !decode(w, r, &req) {
			return
		}
		if req.Name == "" || req.Path == "" {
			fail(w, fmt.Errorf("%w: a volume needs \"name\" and \"path\"", ErrBadRequest))
			return
		}
		if v := vvm(w); v != nil {
			vol, err := v.AttachVolume(req)
			result(w, vol, err)
		}
	})
	mux.HandleFunc("DELETE /v1/vm/volumes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if v := vvm(w); v != nil {
			vol, err := v.DetachVolume(r.PathValue("name"))
			result(w, vol, err)
		}
	})
}

// AttachVolume hot-plugs a volume.
func (c *Client) AttachVolume(ctx context.Context, req VolumeRequest) (Volume, error) {
	var v Volume
	return v, c.do(ctx, http.MethodPut, "/v1/vm/volumes", req, &v)
}

// DetachVolume unplugs the named volume.
func (c *Client) DetachVolume(ctx context.Context, name string) (Volume, error) {
	var v Volume
	return v, c.do(ctx, http.MethodDelete, "/v1/vm/volumes/"+url.PathEscape(name), nil, &v)
}

// Volumes lists the hot-plugged volumes.
func (c *Client) Volumes(ctx context.Context) ([]Volume, error) {
	var v []Volume
	return v, c.do(ctx, http.MethodGet, "/v1/vm/volumes", nil, &v)
}
