package runner

import (
	"errors"
	"fmt"
	"os"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/virtio/scsi"
)

var _ api.VolumeVM = (*Runner)(nil)

// AttachVolume implements api.VolumeVM. Hot-plug is serialised with
// snapshots and refused during a migration: both carry the volumes.
func (r *Runner) AttachVolume(req api.VolumeRequest) (api.Volume, error) {
	return r.attachVolume(req, nil)
}

// AttachVolumeFile is AttachVolume for an image already open at f (see
// api.ServeVolumeFiles); the caller keeps and closes f. req.Path, if set,
// only names it.
func (r *Runner) AttachVolumeFile(req api.VolumeRequest, f *os.File) (api.Volume, error) {
	if req.Path == "" {
		req.Path = f.Name()
	}
	return r.attachVolume(req, f)
}

func (r *Runner) attachVolume(req api.VolumeRequest, f *os.File) (api.Volume, error) {
	format := block.FormatRaw
	if req.Format != "" {
		f, err := block.ParseFormat(req.Format)
		if err != nil {
			return api.Volume{}, fmt.Errorf("%w: volume %q: %v", api.ErrBadRequest, req.Name, err)
		}
		format = f
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("attach a volume"); err != nil {
		return api.Volume{}, err
	}
	at, err := r.m.AttachVolume(scsi.Volume{Name: req.Name, Path: req.Path, Format: format, ReadOnly: req.ReadOnly, File: f})
	return apiVolume(at), volumeErr(err)
}

// DetachVolume implements api.VolumeVM.
func (r *Runner) DetachVolume(name string) (api.Volume, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkRunning("detach a volume"); err != nil {
		return api.Volume{}, err
	}
	at, err := r.m.DetachVolume(name)
	return apiVolume(at), volumeErr(err)
}

// Volumes implements api.VolumeVM.
func (r *Runner) Volumes() ([]api.Volume, error) {
	var out []api.Volume
	for _, at := range r.m.Volumes() {
		out = append(out, apiVolume(at))
	}
	return out, nil
}

func apiVolume(at scsi.Attached) api.Volume {
	return api.Volume{Name: at.Name, Path: at.Path, Format: string(at.Format), ReadOnly: at.ReadOnly, Target: at.Target, SizeBytes: at.Size}
}

// volumeErr gives hot-plug errors their HTTP status: a VM without a
// controller, or a volume it lacks, is a conflict with the VM's state; a
// name in use, a full controller or an image that can't be opened is a
// bad request.
func volumeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, machine.ErrNoSCSI), errors.Is(err, scsi.ErrNotAttached):
		return fmt.Errorf("%w: %w", api.ErrConflict, err)
	case errors.Is(err, scsi.ErrBadVolume):
		return fmt.Errorf("%w: %w", api.ErrBadRequest, err)
	}
	return err
}
