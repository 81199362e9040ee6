package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/rest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// sshFixture is the test guest's SSH server (test/guestagent, the real
// binary) on a local port, behind a TLS server that serves the VMI
// testvm's portforward/22 websocket as virt-api does (its bytes in binary
// messages), and the virtctl client that reaches it.
type sshFixture struct {
	c                *apiClient
	home, key, known string
}

func newSSHFixture(t *testing.T) *sshFixture {
	t.Helper()
	dir := t.TempDir()
	f := &sshFixture{home: filepath.Join(dir, "root"), key: filepath.Join(dir, "id"), known: filepath.Join(dir, "known_hosts")}
	require.NoError(t, os.MkdirAll(filepath.Join(f.home, ".ssh"), 0o700))
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	blk, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.key, pem.EncodeToMemory(blk), 0o600))
	pub, err := ssh.NewPublicKey(priv.Public())
	require.NoError(t, err)
	keys := filepath.Join(f.home, ".ssh", "authorized_keys")
	require.NoError(t, os.WriteFile(keys, ssh.MarshalAuthorizedKey(pub), 0o600))

	bin := filepath.Join(dir, "kubevmm-agent")
	out, err := exec.Command("go", "build", "-o", bin, "../../test/guestagent").CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin, "-ssh", "127.0.0.1:0", "-home", f.home, "-authorized-keys", keys)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	guest := strings.TrimSpace(strings.TrimPrefix(line, "kubevmm-agent: ssh on "))

	up := websocket.Upgrader{Subprotocols: []string{v1.ConsoleSubprotocol}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/testvm/portforward/22/tcp" {
			http.Error(w, `{"kind":"Status","message":"no such thing: `+r.URL.Path+`"}`, http.StatusNotFound)
			return
		}
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		conn, err := net.Dial("tcp", guest)
		if err != nil {
			ws.Close()
			return
		}
		defer conn.Close()
		pipe(ws, conn, conn)
	}))
	t.Cleanup(srv.Close)
	f.c = &apiClient{cfg: &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, ns: "default"}
	return f
}

// virtctl runs a virtctl ssh or scp command.
func (f *sshFixture) virtctl(cmd string, stdin string, args ...string) (int, string, error) {
	return f.run(stdin, append([]string{cmd, "-i", f.key, "--known-hosts", f.known}, args...)...)
}

// run runs a virtctl command line against the fixture's guest.
func (f *sshFixture) run(stdin string, args ...string) (int, string, error) {
	var out bytes.Buffer
	code, err := runWith(&cli{client: f.c, stdin: strings.NewReader(stdin), stdout: &out}, args)
	return code, out.String(), err
}

func TestVirtctlSSH(t *testing.T) {
	f := newSSHFixture(t)
	host, err := os.Hostname()
	require.NoError(t, err)

	code, out, err := f.virtctl("ssh", "", "root@vmi/testvm", "-c", "echo hi; hostname")
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "hi\n"+host+"\n", out)
	known, err := os.ReadFile(f.known)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(known), "vmi/testvm.default ssh-ed25519 "), "a new guest's key is kept: %q", known)

	// The same guest again, in KubeVirt's other spellings, the user from
	// -l; the kept key matches. A command's status and stdin come through.
	code, out, err = f.virtctl("ssh", "two lines\nof input\n", "-l", "root", "vmi/testvm/default", "-c", "wc -l; exit 4")
	require.NoError(t, err)
	assert.Equal(t, 4, code)
	assert.Equal(t, "2", strings.TrimSpace(out))
	code, _, err = f.virtctl("ssh", "", "root@vmi/testvm", "-c", "exit 1")
	require.NoError(t, err, "the command's status alone")
	assert.Equal(t, 1, code)
	// no -c: a shell reading its commands from stdin (no pty)
	code, out, err = f.virtctl("ssh", "echo from a shell\n", "root@vmi/testvm.default")
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "from a shell\n", out)
	again, err := os.ReadFile(f.known)
	require.NoError(t, err)
	assert.Equal(t, string(known), string(again), "a known key is not added again")

	// Another key for the guest in the file: refused.
	_, other, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	otherPub, err := ssh.NewPublicKey(other.Public())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.known, []byte("vmi/testvm.default "+string(ssh.MarshalAuthorizedKey(otherPub))), 0o600))
	code, _, err = f.virtctl("ssh", "", "root@vmi/testvm", "-c", "true")
	assert.Equal(t, 1, code)
	assert.ErrorContains(t, err, "host key of vmi/testvm.default changed")
}

func TestVirtctlSSHRefuses(t *testing.T) {
	f := newSSHFixture(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no type", []string{"root@testvm", "-c", "true"}, 2, "type/name"},
		{"bad type", []string{"root@pod/testvm"}, 2, "unsupported resource type"},
		{"empty user", []string{"@vmi/testvm"}, 2, "user name is empty"},
		{"bad port", []string{"-p", "70000", "root@vmi/testvm"}, 2, "not a port number"},
		{"two targets", []string{"root@vmi/testvm", "vmi/other"}, 2, "want one"},
		{"another VMI", []string{"root@vmi/nothing", "-c", "true"}, 1, "no such thing"},
		{"a user the guest lacks", []string{"alice@vmi/testvm", "-c", "true"}, 1, "unable to authenticate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, err := f.virtctl("ssh", "", tc.args...)
			assert.Equal(t, tc.code, code)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	code, _, err := f.run("", "ssh", "-i", filepath.Join(t.TempDir(), "none"), "root@vmi/testvm")
	assert.Equal(t, 1, code)
	assert.ErrorContains(t, err, "identity")
}

func TestVirtctlSCP(t *testing.T) {
	f := newSSHFixture(t)
	data := make([]byte, 300<<10)
	_, err := rand.Read(data)
	require.NoError(t, err)
	dir := t.TempDir()
	local := filepath.Join(dir, "blob")
	require.NoError(t, os.WriteFile(local, data, 0o600))

	// in: to a path in home (relative), and into a directory
	code, _, err := f.virtctl("scp", "", local, "root@vmi/testvm:copy")
	require.NoError(t, err)
	require.Equal(t, 0, code)
	got, err := os.ReadFile(filepath.Join(f.home, "copy"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the guest's copy is unchanged")
	code, _, err = f.virtctl("scp", "", local, "root@vmi/testvm.default:"+f.home+"/.ssh")
	require.NoError(t, err)
	require.Equal(t, 0, code)
	got, err = os.ReadFile(filepath.Join(f.home, ".ssh", "blob"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))

	// out: to a file, and into a directory
	back := filepath.Join(dir, "back")
	code, _, err = f.virtctl("scp", "", "root@vmi/testvm:copy", back)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	got, err = os.ReadFile(back)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "the copy back is unchanged")
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	code, _, err = f.virtctl("scp", "", "-l", "root", "vmi/testvm:copy", sub)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	got, err = os.ReadFile(filepath.Join(sub, "copy"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got))

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"both local", []string{local, back}, 2, "one of SRC and DST"},
		{"both remote", []string{"root@vmi/testvm:a", "root@vmi/testvm:b"}, 2, "one of SRC and DST"},
		{"no remote path", []string{local, "root@vmi/testvm:"}, 2, "path is empty"},
		{"a missing guest file", []string{"root@vmi/testvm:nothing", back}, 1, "no such file"},
		{"a guest directory", []string{"root@vmi/testvm:.ssh", back}, 1, "not a regular file"},
		{"a local directory", []string{dir, "root@vmi/testvm:x"}, 1, "not a regular file"},
		{"a directory, recursively, without --local-ssh", []string{"-r", dir, "root@vmi/testvm:x"}, 2, "--recursive and --preserve need --local-ssh"},
		{"into a missing guest directory", []string{local, "root@vmi/testvm:/no/such/dir/x"}, 1, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, err := f.virtctl("scp", "", tc.args...)
			assert.Equal(t, tc.code, code)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// A hostile guest's file line can't name a path outside the target.
func TestParseSCPFileLine(t *testing.T) {
	for _, line := range []string{"C0644 4 ../x", "C0644 4 a/b", "C0644 -1 x", "C0644 4 ..", "Cxx 4 x", "E", "C0644 4", "D0755 0 d"} {
		_, _, _, err := parseSCPFileLine(line)
		assert.Error(t, err, line)
	}
	mode, size, name, err := parseSCPFileLine("C0640 12 a b")
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), mode)
	assert.Equal(t, int64(12), size)
	assert.Equal(t, "a b", name)
}

// --local-ssh: the local ssh gets virtctl port-forward --stdio as its
// ProxyCommand, to the target's port.
func TestLocalSSHArgs(t *testing.T) {
	s := &sshSession{c: &apiClient{ns: "ns1"}, f: sshFlags{port: 2222, identity: "/k", knownHosts: "/kh", localOpts: []string{"-v"}},
		target: vmTarget{user: "root", kind: "virtualmachines", name: "vm1"}}
	args := s.localArgs()
	self, err := os.Executable()
	require.NoError(t, err)
	assert.Equal(t, []string{"-o", "ProxyCommand=" + shellQuote(self) + " port-forward --stdio vm/vm1.ns1 2222",
		"-i", "/k", "-o", "UserKnownHostsFile=/kh", "-v"}, args)
}

// hostileGuest is an SSH server whose every command answers reply and
// ends: a guest that breaks scp's protocol (the real server's error paths
// are tested against it in test/guestagent).
func hostileGuest(t *testing.T, reply []byte) *ssh.Client {
	t.Helper()
	_, hostKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(hostKey)
	require.NoError(t, err)
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		sc, err := l.Accept()
		if err != nil {
			return
		}
		_, chans, reqs, err := ssh.NewServerConn(sc, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, creqs, err := nc.Accept()
			if err != nil {
				return
			}
			go func() {
				for req := range creqs {
					_ = req.Reply(req.Type == "exec", nil)
					if req.Type == "exec" {
						// the reply, then what virtctl sends until it
						// gives up
						_, _ = ch.Write(reply)
						_ = ch.CloseWrite()
						_, _ = io.Copy(io.Discard, ch)
						_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
						_ = ch.Close()
					}
				}
			}()
		}
	}()
	client, err := ssh.Dial("tcp", l.Addr().String(), &ssh.ClientConfig{User: "root", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestSCPFromAHostileGuest(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, reply, want string }{
		{"a path in the name", "C0644 4 ../evil\nevil\x00", "bad file line"},
		{"an endless line", "C0644 4 " + strings.Repeat("x", 10000) + "\n", "buffer full"},
		{"not a file", "D0755 0 dir\n", "unexpected"},
		{"an error", "\x01scp: nothing here\n", "nothing here"},
		{"short data", "C0644 100 f\nabc", "3 of 100 bytes"},
		{"nothing", "", "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scpFetch(hostileGuest(t, []byte(tc.reply)), "f", filepath.Join(dir, "sub"))
			assert.ErrorContains(t, err, tc.want)
		})
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
