package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// sshGuest is the SSH server binary (kubevmm-agent -ssh) on a local port,
// with root's home in a temporary directory and the key of a cloud-init
// metadata file (as the guest's /init passes it).
type sshGuest struct {
	addr, home, keyFile string
	signer              ssh.Signer
}

func startSSHGuest(t *testing.T) *sshGuest {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubevmm-agent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	g := &sshGuest{home: filepath.Join(dir, "root"), keyFile: filepath.Join(dir, "id_ed25519")}
	require.NoError(t, os.Mkdir(g.home, 0o700))
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	g.signer, err = ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	blk, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(g.keyFile, pem.EncodeToMemory(blk), 0o600))
	pub := string(ssh.MarshalAuthorizedKey(g.signer.PublicKey()))
	meta, err := json.Marshal(map[string]any{"instance-id": "x", "public-keys": map[string]string{"0": pub}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o644))

	cmd := exec.Command(bin, "-ssh", "127.0.0.1:0", "-home", g.home,
		"-authorized-keys", filepath.Join(g.home, ".ssh", "authorized_keys"), "-cloud-init-meta", filepath.Join(dir, "meta.json"))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	g.addr = strings.TrimSpace(strings.TrimPrefix(line, "kubevmm-agent: ssh on "))
	return g
}

func (g *sshGuest) dial(t *testing.T, user string, signer ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	return ssh.Dial("tcp", g.addr, &ssh.ClientConfig{
		User:            user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a fresh key per start: nothing to compare
		Timeout:         time.Minute,
	})
}

func TestSSHServerExec(t *testing.T) {
	g := startSSHGuest(t)
	b, err := os.ReadFile(filepath.Join(g.home, ".ssh", "authorized_keys"))
	require.NoError(t, err)
	assert.Equal(t, string(ssh.MarshalAuthorizedKey(g.signer.PublicKey())), string(b), "the metadata's key is root's")
	c, err := g.dial(t, "root", g.signer)
	require.NoError(t, err)
	defer c.Close()
	host, err := os.Hostname()
	require.NoError(t, err)
	for _, tc := range []struct {
		name, cmd, stdin, stdout, stderr string
		status                           int
	}{
		{"output", "echo hi; hostname", "", "hi\n" + host + "\n", "", 0},
		{"input", "cat; echo .", "some input\n", "some input\n.\n", "", 0},
		{"stderr and status", "echo oops >&2; exit 3", "", "", "oops\n", 3},
		{"home", "pwd; echo $HOME", "", g.home + "\n" + g.home + "\n", "", 0},
		{"no such command", "no-such-command-here", "", "", "", 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.NewSession()
			require.NoError(t, err)
			var out, errOut bytes.Buffer
			s.Stdin, s.Stdout, s.Stderr = strings.NewReader(tc.stdin), &out, &errOut
			err = s.Run(tc.cmd)
			if tc.status == 0 {
				require.NoError(t, err)
			} else {
				var ee *ssh.ExitError
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, tc.status, ee.ExitStatus())
			}
			assert.Equal(t, tc.stdout, out.String())
			if tc.stderr != "" || tc.status != 127 {
				assert.Equal(t, tc.stderr, errOut.String())
			}
		})
	}
}

func TestSSHServerRefuses(t *testing.T) {
	g := startSSHGuest(t)
	_, other, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	stranger, err := ssh.NewSignerFromKey(other)
	require.NoError(t, err)
	_, err = g.dial(t, "root", stranger)
	assert.ErrorContains(t, err, "unable to authenticate", "a key not in authorized_keys")
	_, err = g.dial(t, "alice", g.signer)
	assert.ErrorContains(t, err, "unable to authenticate", "a user other than root")
	_, err = ssh.Dial("tcp", g.addr, &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.Password("root")},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: time.Minute,
	})
	assert.ErrorContains(t, err, "unable to authenticate", "passwords")

	// a subsystem (OpenSSH scp's default SFTP) and a pty are refused
	c, err := g.dial(t, "root", g.signer)
	require.NoError(t, err)
	defer c.Close()
	s, err := c.NewSession()
	require.NoError(t, err)
	assert.Error(t, s.RequestSubsystem("sftp"))
	assert.Error(t, s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
}

// OpenSSH's own ssh and scp (-O: the original protocol) against the
// server: what a user's --local-ssh runs.
func TestSSHServerWithOpenSSH(t *testing.T) {
	sshBin, scpBin := hosttools.Require(t, "ssh"), hosttools.Require(t, "scp")
	g := startSSHGuest(t)
	host, port, err := net.SplitHostPort(g.addr)
	require.NoError(t, err)
	opts := []string{"-i", g.keyFile, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"}

	out, err := exec.Command(sshBin, append(opts, "-T", "-p", port, "root@"+host, "echo hi from $(pwd)")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "hi from "+g.home+"\n", string(out))

	data := make([]byte, 300<<10)
	_, err = rand.Read(data)
	require.NoError(t, err)
	local := filepath.Join(t.TempDir(), "blob")
	require.NoError(t, os.WriteFile(local, data, 0o640))
	scp := func(args ...string) {
		t.Helper()
		out, err := exec.Command(scpBin, append(append([]string{"-O", "-P", port}, opts...), args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	scp(local, "root@"+host+":")
	got, err := os.ReadFile(filepath.Join(g.home, "blob"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file in home, unchanged")
	fi, err := os.Stat(filepath.Join(g.home, "blob"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	back := filepath.Join(t.TempDir(), "back")
	scp("root@"+host+":"+filepath.Join(g.home, "blob"), back)
	got, err = os.ReadFile(back)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the file back, unchanged")
}

// A hostile or broken scp client gets an error line and status 1; nothing
// is written outside the target.
func TestSSHServerSCPBadInput(t *testing.T) {
	g := startSSHGuest(t)
	c, err := g.dial(t, "root", g.signer)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, os.Mkdir(filepath.Join(g.home, "dir"), 0o755))
	for _, tc := range []struct{ name, cmd, input, want string }{
		{"a name with a path", "scp -t dir", "C0644 4 ../evil\n", "bad file name"},
		{"dot dot", "scp -t dir", "C0644 4 ..\n", "bad file name"},
		{"a negative size", "scp -t dir", "C0644 -4 x\n", "bad file size"},
		{"a bad mode", "scp -t dir", "C99 4 x\n", "bad file mode"},
		{"no name", "scp -t dir", "C0644 4\n", "bad file line"},
		{"a directory", "scp -t dir", "D0755 0 sub\n", "one regular file only"},
		{"an endless line", "scp -t dir", strings.Repeat("C", 5000) + "\n", "too long"},
		{"short data", "scp -t dir", "C0644 100 x\nabc", "3 of 100 bytes"},
		{"recursive", "scp -r -t dir", "", "not supported"},
		{"two paths", "scp -t a b", "", "one path"},
		{"source of a directory", "scp -f dir", "\x00", "not a regular file"},
		{"source of nothing", "scp -f nothing", "\x00", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.NewSession()
			require.NoError(t, err)
			var out, errOut bytes.Buffer
			s.Stdin, s.Stdout, s.Stderr = strings.NewReader(tc.input), &out, &errOut
			err = s.Run(tc.cmd)
			var ee *ssh.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, 1, ee.ExitStatus())
			assert.Contains(t, errOut.String(), tc.want)
		})
	}
	_, err = os.Stat(filepath.Join(g.home, "evil"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"scp -t /tmp/x", []string{"scp", "-t", "/tmp/x"}, false},
		{"scp -f 'a b'", []string{"scp", "-f", "a b"}, false},
		{`scp -t 'it'\''s'`, []string{"scp", "-t", "it's"}, false},
		{`scp -t "x y"  z\ w`, []string{"scp", "-t", "x y", "z w"}, false},
		{"echo hi; hostname", nil, true},
		{"scp -t 'open", nil, true},
		{`trailing\`, nil, true},
		{"", nil, false},
	} {
		got, err := shellWords(tc.in)
		if tc.err {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestInstallCloudInitKeys(t *testing.T) {
	dir := t.TempDir()
	meta := filepath.Join(dir, "meta_data.json")
	keys := filepath.Join(dir, "root", ".ssh", "authorized_keys")
	// ConfigDrive's spelling, a key with a trailing newline as Secrets have
	require.NoError(t, os.WriteFile(meta, []byte(`{"uuid":"u","public_keys":{"0":"ssh-ed25519 AAAA a@b\n"}}`), 0o644))
	require.NoError(t, installCloudInitKeys(meta, keys))
	b, err := os.ReadFile(keys)
	require.NoError(t, err)
	assert.Equal(t, "ssh-ed25519 AAAA a@b\n", string(b))

	require.NoError(t, os.WriteFile(meta, []byte(`{"public_keys":`), 0o644))
	assert.Error(t, installCloudInitKeys(meta, keys), "broken metadata")
}
