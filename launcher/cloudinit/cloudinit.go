// Package cloudinit renders a VMI's cloudInitNoCloud or
// cloudInitConfigDrive volume into the disk image the guest's cloud-init
// reads, laid out as KubeVirt lays it out:
//
//	NoCloud (label cidata):  user-data, meta-data, network-config
//	ConfigDrive (config-2):  openstack/latest/user_data, meta_data.json,
//	                         network_data.json
//
// The metadata is JSON, as KubeVirt writes it: NoCloud's instance-id is the
// VMI's UID (KubeVirt's firmware UUID) and local-hostname its hostname (else
// its name up to the first dot); ConfigDrive's instance_id is name.namespace,
// uuid the same UUID, hostname the same hostname. SSH public keys of
// accessCredentials propagated by noCloud or configDrive go into
// public-keys / public_keys ("0", "1", ...). The network data file is
// written only when there is network data.
//
// Secrets are read from files, as KubeVirt's launcher reads them: the pod
// mounts each Secret under one directory (the launcher has no API access),
// at the paths UserDataSecretDir, NetworkDataSecretDir and
// AccessCredentialDir name. The image is vfat (fat.go); KubeVirt writes
// iso9660, and cloud-init reads both.
package cloudinit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Labels of the two kinds of disk, as cloud-init looks for them.
const (
	NoCloudLabel     = "cidata"
	ConfigDriveLabel = "config-2"
)

// Volume is the VMI's cloud-init volume, or nil. The webhook admits at
// most one.
func Volume(s *v1.VirtualMachineInstanceSpec) *v1.Volume {
	for i := range s.Volumes {
		if v := &s.Volumes[i]; v.CloudInitNoCloud != nil || v.CloudInitConfigDrive != nil {
			return v
		}
	}
	return nil
}

// UserDataSecretDir is where the Secret of a cloud-init volume's
// userDataSecretRef is mounted under base.
func UserDataSecretDir(base, volume string) string {
	return filepath.Join(base, volume+"-userdata")
}

// NetworkDataSecretDir is where the Secret of networkDataSecretRef is mounted.
func NetworkDataSecretDir(base, volume string) string {
	return filepath.Join(base, volume+"-networkdata")
}

// AccessCredentialDir is where an accessCredentials Secret is mounted.
func AccessCredentialDir(base, secret string) string {
	return filepath.Join(base, secret+"-access-cred")
}

// Image is the cloud-init disk of vmi's cloud-init volume, with the
// Secrets read under secretDir. ok is false if the VMI has no such volume.
func Image(vmi *v1.VirtualMachineInstance, secretDir string) (img []byte, ok bool, err error) {
	v := Volume(&vmi.Spec)
	if v == nil {
		return nil, false, nil
	}
	_, src, _ := v.CloudInit()
	noCloud := v.CloudInitNoCloud != nil
	userData, networkData, err := readData(src, secretDir, v.Name)
	if err != nil {
		return nil, true, fmt.Errorf("cloud-init volume %s: %w", v.Name, err)
	}
	keys, err := publicKeys(vmi.Spec.AccessCredentials, secretDir, noCloud)
	if err != nil {
		return nil, true, err
	}
	// KubeVirt takes the firmware UUID, which kubevmm does not implement
	// (the webhook refuses it): the VMI's UID is as unique and as stable.
	uuid := string(vmi.UID)
	var files []file
	if noCloud {
		meta, err := json.Marshal(noCloudMeta{InstanceID: uuid, LocalHostname: vmispec.GuestHostname(vmi), PublicKeys: keys})
		if err != nil {
			return nil, true, err
		}
		files = []file{{"user-data", userData}, {"meta-data", meta}}
		if len(networkData) > 0 {
			files = append(files, file{"network-config", networkData})
		}
	} else {
		id := vmi.Name + "." + vmi.Namespace
		meta, err := json.Marshal(configDriveMeta{LegacyInstanceID: id, InstanceID: id, Hostname: vmispec.GuestHostname(vmi), UUID: uuid, PublicKeys: keys})
		if err != nil {
			return nil, true, err
		}
		const dir = "openstack/latest/"
		files = []file{{dir + "user_data", userData}, {dir + "meta_data.json", meta}}
		if len(networkData) > 0 {
			files = append(files, file{dir + "network_data.json", networkData})
		}
	}
	label := NoCloudLabel
	if !noCloud {
		label = ConfigDriveLabel
	}
	img, err = fatImage(label, files)
	if err != nil {
		return nil, true, fmt.Errorf("cloud-init volume %s: %w", v.Name, err)
	}
	return img, true, nil
}

type noCloudMeta struct {
	InstanceID    string            `json:"instance-id"`
	LocalHostname string            `json:"local-hostname,omitempty"`
	PublicKeys    map[string]string `json:"public-keys,omitempty"`
}

// configDriveMeta carries instance-id twice, as KubeVirt writes it: the
// dashed key older cloud-init versions read and OpenStack's own.
type configDriveMeta struct {
	LegacyInstanceID string            `json:"instance-id"`
	InstanceID       string            `json:"instance_id"`
	Hostname         string            `json:"hostname,omitempty"`
	UUID             string            `json:"uuid,omitempty"`
	PublicKeys       map[string]string `json:"public_keys,omitempty"`
}

func readData(src v1.CloudInitData, secretDir, volume string) (userData, networkData []byte, err error) {
	userData, err = oneOf(src.UserData, src.UserDataBase64, "userData")
	if err != nil {
		return nil, nil, err
	}
	networkData, err = oneOf(src.NetworkData, src.NetworkDataBase64, "networkData")
	if err != nil {
		return nil, nil, err
	}
	if src.UserDataSecretRef != nil {
		if userData, err = readKey(UserDataSecretDir(secretDir, volume), "userdata", "userData"); err != nil {
			return nil, nil, fmt.Errorf("secretRef: %w", err)
		}
	}
	if src.NetworkDataSecretRef != nil {
		if networkData, err = readKey(NetworkDataSecretDir(secretDir, volume), "networkdata", "networkData"); err != nil {
			return nil, nil, fmt.Errorf("networkDataSecretRef: %w", err)
		}
	}
	if len(userData) == 0 && len(networkData) == 0 {
		return nil, nil, errors.New("no user data and no network data")
	}
	return userData, networkData, nil
}

func oneOf(raw, b64, what string) ([]byte, error) {
	if raw != "" {
		return []byte(raw), nil
	}
	if b64 == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%sBase64: %w", what, err)
	}
	return b, nil
}

// readKey reads the first of keys found in a mounted Secret.
func readKey(dir string, keys ...string) ([]byte, error) {
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the Secret has none of the keys %s", strings.Join(keys, ", "))
}

// publicKeys reads the SSH public keys of the access credentials
// propagated to this kind of disk: every key of each Secret, in key order,
// empty ones skipped, numbered across all of them.
func publicKeys(creds []v1.AccessCredential, secretDir string, noCloud bool) (map[string]string, error) {
	keys := map[string]string{}
	for i, c := range creds {
		k := c.SSHPublicKey
		if k == nil || k.Source.Secret == nil || (noCloud && k.PropagationMethod.NoCloud == nil) || (!noCloud && k.PropagationMethod.ConfigDrive == nil) {
			continue
		}
		dir := AccessCredentialDir(secretDir, k.Source.Secret.SecretName)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("accessCredentials[%d]: %w", i, err)
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			// A mounted Secret also holds the kubelet's ..data links.
			if !strings.HasPrefix(e.Name(), "..") && !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				return nil, fmt.Errorf("accessCredentials[%d]: %w", i, err)
			}
			if len(b) > 0 {
				keys[strconv.Itoa(len(keys))] = string(b)
			}
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return keys, nil
}

// Write renders the image (Image) to path, through a temporary file so a
// reader never sees half of it. ok is false if the VMI has no cloud-init
// volume.
func Write(vmi *v1.VirtualMachineInstance, secretDir, path string) (ok bool, err error) {
	img, ok, err := Image(vmi, secretDir)
	if !ok || err != nil {
		return ok, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return true, fmt.Errorf("cloud-init disk: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, img, 0o600); err != nil {
		return true, fmt.Errorf("cloud-init disk: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return true, fmt.Errorf("cloud-init disk: %w", err)
	}
	return true, nil
}
