package v1

import (
	"bytes"
	"encoding/json"
	"fmt"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// DataVolumeSpec decodes the template's spec as CDI's DataVolumeSpec,
// strictly: a field CDI does not have is an error naming it, rather than
// dropped on the way to the DataVolume.
func (t *DataVolumeTemplateSpec) DataVolumeSpec() (*cdiv1.DataVolumeSpec, error) {
	spec := &cdiv1.DataVolumeSpec{}
	if len(t.Spec.Raw) == 0 {
		return spec, nil
	}
	d := json.NewDecoder(bytes.NewReader(t.Spec.Raw))
	d.DisallowUnknownFields()
	if err := d.Decode(spec); err != nil {
		return nil, fmt.Errorf("not a DataVolume spec: %w", err)
	}
	return spec, nil
}
