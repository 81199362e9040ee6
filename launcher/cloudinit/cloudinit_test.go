package cloudinit

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

func vmi(name string, vols ...v1.Volume) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "0f1e2d3c-uid"},
		Spec:       v1.VirtualMachineInstanceSpec{Volumes: vols},
	}
}

func noCloud(c v1.CloudInitNoCloudSource) v1.Volume {
	return v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &c}}
}

func configDrive(c v1.CloudInitConfigDriveSource) v1.Volume {
	return v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &c}}
}

func sshKey(secret string, noCloud bool) v1.AccessCredential {
	c := v1.AccessCredential{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
		Source: v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: secret}},
	}}
	if noCloud {
		c.SSHPublicKey.PropagationMethod.NoCloud = &v1.NoCloudSSHPublicKeyAccessCredentialPropagation{}
	} else {
		c.SSHPublicKey.PropagationMethod.ConfigDrive = &v1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}
	}
	return c
}

// secrets lays Secrets out as the kubelet mounts them: each key a link
// into a ..data directory.
func secrets(t *testing.T, dirs map[string]map[string]string) string {
	base := t.TempDir()
	for d, keys := range dirs {
		data := filepath.Join(base, d, "..2026_data")
		require.NoError(t, os.MkdirAll(data, 0o755))
		require.NoError(t, os.Symlink("..2026_data", filepath.Join(base, d, "..data")))
		for k, v := range keys {
			require.NoError(t, os.WriteFile(filepath.Join(data, k), []byte(v), 0o644))
			require.NoError(t, os.Symlink(filepath.Join("..data", k), filepath.Join(base, d, k)))
		}
	}
	return base
}

// readImage checks the image with fsck.fat and reads it back with mtools:
// its label and every file.
func readImage(t *testing.T, img []byte) (string, map[string]string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ci.img")
	require.NoError(t, os.WriteFile(path, img, 0o644))
	out, err := exec.Command(hosttools.Require(t, "fsck.fat"), "-n", "-v", path).CombinedOutput()
	require.NoError(t, err, "fsck.fat -n:\n%s", out)
	assert.Contains(t, string(out), "12 bit entries")

	listing := hosttools.Run(t, "mdir", "-i", path, "-/", "-b", "::/")
	_, label, _ := strings.Cut(hosttools.Run(t, "mdir", "-i", path, "::/"), "Volume in drive : is ")
	label, _, _ = strings.Cut(label, "\n")
	files := map[string]string{}
	for _, l := range strings.Fields(listing) {
		if strings.HasSuffix(l, "/") {
			continue
		}
		files[strings.TrimPrefix(l, "::/")] = hosttools.Run(t, "mtype", "-i", path, l)
	}
	return strings.TrimSpace(label), files
}

func TestImage(t *testing.T) {
	big := strings.Repeat("network data spanning clusters\n", 500) // 15.5 KiB: 8 clusters
	creds := map[string]map[string]string{
		"ci-userdata":           {"userData": "#cloud-config\nfrom: secret\n"},
		"ci-networkdata":        {"networkdata": "version: 2\n"},
		"keys-access-cred":      {"b": "ssh-ed25519 BBBB b@x", "a": "ssh-rsa AAAA a@x", "empty": ""},
		"drivekeys-access-cred": {"k": "ssh-ed25519 CCCC c@x"},
	}
	for _, tc := range []struct {
		name  string
		vmi   *v1.VirtualMachineInstance
		label string
		files map[string]string
	}{
		{
			name: "noCloud inline, spec hostname",
			vmi: func() *v1.VirtualMachineInstance {
				v := vmi("vm1", noCloud(v1.CloudInitNoCloudSource{UserData: "#cloud-config\nruncmd: [x]\n", NetworkData: big}))
				v.Spec.Hostname = "guest-one"
				return v
			}(),
			label: "cidata",
			files: map[string]string{
				"user-data":      "#cloud-config\nruncmd: [x]\n",
				"meta-data":      `{"instance-id":"0f1e2d3c-uid","local-hostname":"guest-one"}`,
				"network-config": big,
			},
		},
		{
			name:  "noCloud base64, hostname from a dotted name, instance-id the UID",
			vmi:   vmi("web.prod", noCloud(v1.CloudInitNoCloudSource{UserDataBase64: base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho hi\n"))})),
			label: "cidata",
			files: map[string]string{
				"user-data": "#!/bin/sh\necho hi\n",
				"meta-data": `{"instance-id":"0f1e2d3c-uid","local-hostname":"web"}`,
			},
		},
		{
			name: "noCloud from Secrets, with noCloud SSH keys only",
			vmi: func() *v1.VirtualMachineInstance {
				v := vmi("vm3", noCloud(v1.CloudInitNoCloudSource{
					UserDataSecretRef:    &v1.LocalObjectReference{Name: "s"},
					NetworkDataSecretRef: &v1.LocalObjectReference{Name: "n"},
				}))
				v.Spec.AccessCredentials = []v1.AccessCredential{sshKey("keys", true), sshKey("drivekeys", false)}
				return v
			}(),
			label: "cidata",
			files: map[string]string{
				"user-data":      "#cloud-config\nfrom: secret\n",
				"meta-data":      `{"instance-id":"0f1e2d3c-uid","local-hostname":"vm3","public-keys":{"0":"ssh-rsa AAAA a@x","1":"ssh-ed25519 BBBB b@x"}}`,
				"network-config": "version: 2\n",
			},
		},
		{
			name: "configDrive, network data only, configDrive SSH keys",
			vmi: func() *v1.VirtualMachineInstance {
				v := vmi("vm4", configDrive(v1.CloudInitConfigDriveSource{NetworkData: `{"links":[]}`}))
				v.Spec.AccessCredentials = []v1.AccessCredential{sshKey("keys", true), sshKey("drivekeys", false)}
				return v
			}(),
			label: "config-2",
			files: map[string]string{
				"openstack/latest/user_data":         "",
				"openstack/latest/meta_data.json":    `{"instance-id":"vm4.ns","instance_id":"vm4.ns","hostname":"vm4","uuid":"0f1e2d3c-uid","public_keys":{"0":"ssh-ed25519 CCCC c@x"}}`,
				"openstack/latest/network_data.json": `{"links":[]}`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, ok, err := Image(tc.vmi, secrets(t, creds))
			require.NoError(t, err)
			require.True(t, ok)
			label, files := readImage(t, img)
			assert.Equal(t, tc.label, label)
			assert.Equal(t, tc.files, files)

			again, _, err := Image(tc.vmi, secrets(t, creds))
			require.NoError(t, err)
			assert.Equal(t, img, again, "a migration target must render the same disk")
		})
	}
}

func TestImageManyFiles(t *testing.T) {
	// Long and clashing names (8.3 aliases), nested directories, a file
	// that fills a cluster exactly: what the writer must get right beyond
	// the two fixed layouts.
	var files []file
	want := map[string]string{}
	for _, p := range []string{
		"a-very-long-file-name-of-forty-characters.txt", "a-very-long-file-name-too.txt", "x",
		"dir/sub/deeper/file.json", "dir/sub/other", "dir/exact",
	} {
		data := strings.Repeat(p+"\n", 3)
		if p == "dir/exact" {
			data = strings.Repeat("e", sectorSize)
		}
		files = append(files, file{p, []byte(data)})
		want[p] = data
	}
	img, err := fatImage("TEST", files)
	require.NoError(t, err)
	label, got := readImage(t, img)
	assert.Equal(t, "TEST", label)
	assert.Equal(t, want, got)
}

func TestImageErrors(t *testing.T) {
	base := secrets(t, map[string]map[string]string{"ci-userdata": {"other": "x"}})
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		want string
	}{
		{"bad base64", vmi("v", noCloud(v1.CloudInitNoCloudSource{UserDataBase64: "!!"})), "cloud-init volume ci: userDataBase64: illegal base64"},
		{"nothing", vmi("v", configDrive(v1.CloudInitConfigDriveSource{})), "no user data and no network data"},
		{"Secret without the key", vmi("v", noCloud(v1.CloudInitNoCloudSource{UserDataSecretRef: &v1.LocalObjectReference{Name: "s"}})), "secretRef: the Secret has none of the keys userdata, userData"},
		{"Secret not mounted", vmi("v", configDrive(v1.CloudInitConfigDriveSource{NetworkDataSecretRef: &v1.LocalObjectReference{Name: "s"}})), "networkDataSecretRef: the Secret has none of the keys"},
		{"too large", vmi("v", noCloud(v1.CloudInitNoCloudSource{UserData: strings.Repeat("x", 9<<20)})), "do not fit a FAT12 image"},
		{"credential Secret not mounted", func() *v1.VirtualMachineInstance {
			v := vmi("v", noCloud(v1.CloudInitNoCloudSource{UserData: "x"}))
			v.Spec.AccessCredentials = []v1.AccessCredential{sshKey("gone", true)}
			return v
		}(), "accessCredentials[0]: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ok, err := Image(tc.vmi, base)
			assert.True(t, ok)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, ok, err := Image(vmi("v", v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "i"}}}), base)
	assert.False(t, ok)
	assert.NoError(t, err)
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud-init", "ci.img")
	ok, err := Write(vmi("v", noCloud(v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"})), t.TempDir(), path)
	require.NoError(t, err)
	require.True(t, ok)
	_, files := readImage(t, mustRead(t, path))
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	assert.Equal(t, []string{"meta-data", "user-data"}, keys)
	_, err = os.Stat(path + ".tmp")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
