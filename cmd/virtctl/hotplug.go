package main

// virtctl addvolume VMI --volume-name=NAME [--persist] [--bus=scsi] [--dry-run]
// virtctl removevolume VMI --volume-name=NAME [--persist] [--dry-run]
//
// As upstream's: the volume is a DataVolume when one of that name exists,
// else a PersistentVolumeClaim; --persist goes through the VM (its spec
// keeps the volume), without it through the VMI.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

type volumeCmd struct {
	op, vmi, volume string
	persist, dryRun bool
}

// unsupportedVolumeFlags are upstream's addvolume flags kubevmm refuses
// by name: the guest knows a hot-plugged disk by the volume's name (its
// serial), and kubevmm's hot-plugged volumes are plain SCSI disks.
var unsupportedVolumeFlags = []string{"serial", "cache", "disk-type"}

func parseVolumeCmd(op string, args []string) (*volumeCmd, error) {
	v := &volumeCmd{op: op}
	fs := flag.NewFlagSet(op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&v.volume, "volume-name", "", "the DataVolume or PVC (and the volume's name)")
	fs.BoolVar(&v.persist, "persist", false, "change the VM's spec too")
	fs.BoolVar(&v.dryRun, "dry-run", false, "check the request without changing anything")
	bus := "scsi"
	if op == "addvolume" {
		fs.StringVar(&bus, "bus", "scsi", "the disk's bus (scsi)")
	}
	var pos []string
	for {
		for _, a := range args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			for _, f := range unsupportedVolumeFlags {
				if strings.HasPrefix(a, "-") && name == f && op == "addvolume" {
					return nil, fmt.Errorf("--%s is not supported by kubevmm's virtctl", f)
				}
			}
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != 1 {
		return nil, errors.New("want VMI --volume-name=NAME")
	}
	v.vmi = pos[0]
	if v.volume == "" {
		return nil, errors.New("--volume-name is required")
	}
	if bus != string(v1.DiskBusSCSI) {
		return nil, fmt.Errorf("--bus=%s is not supported by kubevmm's virtctl: hot-plugged disks are on the scsi bus", bus)
	}
	return v, nil
}

// body is the subresource's request: remove names the volume; add says
// whether it is a DataVolume (isDV) or a claim.
func (v *volumeCmd) body(isDV bool) any {
	var dry []string
	if v.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	if v.op == "removevolume" {
		return &v1.RemoveVolumeOptions{Name: v.volume, DryRun: dry}
	}
	src := &v1.HotplugVolumeSource{}
	if isDV {
		src.DataVolume = &v1.DataVolumeSource{Name: v.volume, Hotpluggable: true}
	} else {
		src.PersistentVolumeClaim = &v1.PersistentVolumeClaimVolumeSource{ClaimName: v.volume, Hotpluggable: true}
	}
	return &v1.AddVolumeOptions{
		Name:         v.volume,
		Disk:         &v1.Disk{Name: v.volume, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
		VolumeSource: src,
		DryRun:       dry,
	}
}

func (c *apiClient) volume(op string, args []string, stdout io.Writer) (int, error) {
	v, err := parseVolumeCmd(op, args)
	if err != nil {
		return 2, fmt.Errorf("%s: %w", op, err)
	}
	ctx := context.Background()
	isDV := false
	if op == "addvolume" {
		if isDV, err = c.isDataVolume(ctx, v.volume); err != nil {
			return 1, fmt.Errorf("%s: %w", op, err)
		}
	}
	b, err := json.Marshal(v.body(isDV))
	if err != nil {
		return 1, err
	}
	kind, what := "virtualmachineinstances", "VMI"
	if v.persist {
		kind, what = "virtualmachines", "VM"
	}
	if _, err := c.do(ctx, http.MethodPut, c.url(kind, v.vmi, op), bytes.NewReader(b)); err != nil {
		return 1, fmt.Errorf("%s %s: %w", op, v.vmi, err)
	}
	verb := map[string]string{"addvolume": "add", "removevolume": "remove"}[op]
	fmt.Fprintf(stdout, "Successfully submitted %s volume request to %s %s for volume %s\n", verb, what, v.vmi, v.volume)
	return 0, nil
}

// isDataVolume says whether a DataVolume of that name exists; a cluster
// without CDI has none.
func (c *apiClient) isDataVolume(ctx context.Context, name string) (bool, error) {
	scheme := runtime.NewScheme()
	if err := cdiv1.AddToScheme(scheme); err != nil {
		return false, err
	}
	k, err := client.New(c.cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, err
	}
	err = k.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, &cdiv1.DataVolume{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err): // no such DataVolume, or no CDI
		return false, nil
	default:
		return false, fmt.Errorf("looking up DataVolume %s/%s: %w", c.ns, name, err)
	}
}
