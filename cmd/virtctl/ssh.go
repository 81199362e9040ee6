package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// sshFlags are the flags KubeVirt's virtctl ssh and scp share, and scp's.
type sshFlags struct {
	identity, user, knownHosts, command string
	port                                int
	localSSH                            bool
	localOpts                           []string
	recursive, preserve                 bool // scp's
}

func (f *sshFlags) register(fs *pflag.FlagSet, forSSH bool) {
	fs.StringVarP(&f.identity, "identity-file", "i", "",
		"--identity-file=~/.ssh/id_ed25519: the private key (default the first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	fs.StringVarP(&f.user, "username", "l", "", "--username=: the user in the guest (default the local user)")
	fs.IntVarP(&f.port, "port", "p", 22, "--port=22: the guest's SSH port")
	fs.StringVar(&f.knownHosts, "known-hosts", "", "--known-hosts=~/.ssh/kubevirt_known_hosts: the known hosts file (default ~/.ssh/kubevirt_known_hosts)")
	fs.StringArrayVarP(&f.localOpts, "local-ssh-opts", "t", nil,
		`--local-ssh-opts="-o StrictHostKeyChecking=no": an option for the local ssh/scp (repeatable), with --local-ssh`)
	// kubevmm's own, kept out of the help: its native client is the
	// default (upstream's v1.9 always runs the local ssh), so the local
	// one is asked for.
	fs.BoolVar(&f.localSSH, "local-ssh", false, "run the local ssh/scp with virtctl port-forward --stdio as its ProxyCommand")
	_ = fs.MarkHidden("local-ssh") // the flag exists: no error to handle
	if forSSH {
		fs.StringVarP(&f.command, "command", "c", "", "--command='ls /': run this command instead of a shell")
	} else {
		fs.BoolVarP(&f.recursive, "recursive", "r", false, "Copy directories, recursively (with --local-ssh)")
		fs.BoolVar(&f.preserve, "preserve", false, "Keep the files' modification and access times and modes (with --local-ssh)")
	}
}

func (c *cli) sshCommand() *cobra.Command {
	var f sshFlags
	cmd := &cobra.Command{
		Use:   "ssh (VM|VMI)",
		Short: "Open an SSH connection to a virtual machine or virtual machine instance.",
		Long: `Open an SSH connection to a virtual machine's or virtual machine instance's guest, through
the API server's portforward subresource: [user@]type/name[.namespace] or type/name/namespace,
type vm or vmi. kubevmm's virtctl speaks SSH itself (public keys, no pty: a shell reads lines
from stdin); --local-ssh runs the local ssh instead.`,
		Example: `  # A shell as user jdoe in the VMI 'testvmi':
  virtctl ssh jdoe@vmi/testvmi

  # A command, in the VM 'testvm' of namespace mynamespace:
  virtctl ssh jdoe@vm/testvm.mynamespace --command 'uname -a'`,
		Args: exactArgs(1, "one [user@]type/name[.namespace]"),
		RunE: c.withClient(func(ac *apiClient, _ *cobra.Command, args []string) (int, error) {
			return ac.ssh(f, args[0], c.stdin, c.stdout)
		}),
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (c *cli) scpCommand() *cobra.Command {
	var f sshFlags
	cmd := &cobra.Command{
		Use:   "scp (VM|VMI)",
		Short: "Copy files from or to a virtual machine or virtual machine instance.",
		Long: `Copy a file from or to a virtual machine's or virtual machine instance's guest: one of
SRC and DST is [user@]type/name[.namespace]:PATH, the other a local path. kubevmm's virtctl
copies one regular file itself; --local-ssh runs the local scp (directories, -r).`,
		Example: `  # A file to the home directory of user jdoe in the VMI 'testvmi':
  virtctl scp myfile.bin jdoe@vmi/testvmi:myfile.bin

  # A file from the VM 'testvm' of namespace mynamespace:
  virtctl scp jdoe@vm/testvm.mynamespace:myfile.bin ~/myfile.bin`,
		Args: exactArgs(2, "SRC and DST, one of them [user@]type/name[.namespace]:PATH"),
		RunE: runE(func(_ *cobra.Command, args []string) (int, error) {
			if (f.recursive || f.preserve) && !f.localSSH {
				return 2, errors.New("scp: --recursive and --preserve need --local-ssh: kubevmm's own scp copies one file")
			}
			ac, err := c.apiClient()
			if err != nil {
				return 1, err
			}
			return ac.scp(f, args[0], args[1], c.stdin, c.stdout)
		}),
	}
	f.register(cmd.Flags(), false)
	return cmd
}

// vmTarget is where ssh/scp go: a user on a VM's or VMI's guest.
type vmTarget struct{ user, kind, name, ns string }

// parseVMTarget reads [user@]type/name[.namespace] or [user@]type/name/namespace.
func parseVMTarget(s string) (vmTarget, error) {
	var t vmTarget
	if u, rest, ok := strings.Cut(s, "@"); ok {
		if u == "" {
			return t, fmt.Errorf("target %q: the user name is empty", s)
		}
		t.user, s = u, rest
	}
	if !strings.Contains(s, "/") {
		return t, fmt.Errorf("target %q: want [user@]type/name[.namespace] (type vm or vmi)", s)
	}
	var err error
	t.kind, t.name, t.ns, err = parseTarget(s)
	return t, err
}

// short is the target as ssh shows it and known_hosts names it.
func (t vmTarget) short(ns string) string {
	k := "vmi"
	if t.kind == "virtualmachines" {
		k = "vm"
	}
	return k + "/" + t.name + "." + ns
}

// sshSession is what ssh and scp need of a command's setup: a client
// connection to the guest, or the local ssh's arguments.
type sshSession struct {
	c      *apiClient
	f      sshFlags
	target vmTarget
	dial   func() (net.Conn, error) // a stream to the guest's SSH port
}

func (c *apiClient) newSSHSession(f sshFlags, t vmTarget) (*sshSession, error) {
	c = c.inNamespace(t.ns)
	if t.user == "" {
		t.user = f.user
	}
	if t.user == "" {
		t.user = os.Getenv("USER")
	}
	if t.user == "" {
		return nil, errors.New("no user name: give user@ or --username")
	}
	if f.port <= 0 || f.port > 65535 {
		return nil, fmt.Errorf("port %d: not a port number", f.port)
	}
	s := &sshSession{c: c, f: f, target: t}
	s.dial = func() (net.Conn, error) {
		ws, err := c.dial(t.kind, t.name, fmt.Sprintf("portforward/%d/tcp", f.port))
		if err != nil {
			return nil, fmt.Errorf("port-forward %s: %w", t.name, err)
		}
		return &wsConn{ws: ws}, nil
	}
	return s, nil
}

// connect opens the native SSH client connection: public-key
// authentication with the identity file; the guest's host key is checked
// against the known hosts file, a new guest's key added to it (as
// OpenSSH's StrictHostKeyChecking=accept-new) and a changed key refused.
func (s *sshSession) connect() (*ssh.Client, error) {
	signer, err := loadIdentity(s.f.identity)
	if err != nil {
		return nil, err
	}
	known := s.f.knownHosts
	if known == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("known hosts: %w", err)
		}
		known = filepath.Join(home, ".ssh", "kubevirt_known_hosts")
	}
	cfg := &ssh.ClientConfig{
		User:            s.target.user,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: acceptNewHostKey(known),
		Timeout:         time.Minute,
	}
	conn, err := s.dial()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(s.target.short(s.c.ns), strconv.Itoa(s.f.port))
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		_ = conn.Close() // the handshake's error is the one to report
		return nil, fmt.Errorf("ssh %s: %w", s.target.short(s.c.ns), err)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

func loadIdentity(path string) (ssh.Signer, error) {
	paths := []string{path}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		paths = nil
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			paths = append(paths, filepath.Join(home, ".ssh", n))
		}
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) && path == "" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, fmt.Errorf("identity %s: protected by a passphrase: use --local-ssh (and an ssh-agent)", p)
		}
		if err != nil {
			return nil, fmt.Errorf("identity %s: %w", p, err)
		}
		return signer, nil
	}
	return nil, errors.New("no identity: give -i FILE (none of ~/.ssh/id_ed25519, id_ecdsa, id_rsa exists)")
}

// acceptNewHostKey checks a host key against the known hosts file at
// path: a known key passes, a different key for the host is refused, and
// an unknown host's key is appended.
func acceptNewHostKey(path string) ssh.HostKeyCallback {
	return func(host string, remote net.Addr, key ssh.PublicKey) error {
		if _, err := os.Stat(path); err == nil {
			check, err := knownhosts.New(path)
			if err != nil {
				return fmt.Errorf("known hosts: %w", err)
			}
			err = check(host, remote, key)
			var ke *knownhosts.KeyError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ke) && len(ke.Want) > 0:
				return fmt.Errorf("the host key of %s changed (%s line %d has another): if the guest's key really changed, delete that line",
					knownhosts.Normalize(host), ke.Want[0].Filename, ke.Want[0].Line)
			case !errors.As(err, &ke):
				return err
			}
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("known hosts: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("known hosts: %w", err)
		}
		_, err = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(host)}, key))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("known hosts: %w", err)
		}
		fmt.Fprintf(os.Stderr, "Warning: Permanently added '%s' (%s) to the list of known hosts (%s).\n", knownhosts.Normalize(host), key.Type(), path)
		return nil
	}
}

// ssh is `virtctl ssh [flags] [user@]type/name[.namespace]`: a command
// (-c) or a shell in the guest, through the portforward subresource.
// The native client has no pty: a shell reads lines from stdin.
func (c *apiClient) ssh(f sshFlags, target string, stdin io.Reader, stdout io.Writer) (int, error) {
	t, err := parseVMTarget(target)
	if err != nil {
		return 2, fmt.Errorf("ssh: %w", err)
	}
	s, err := c.newSSHSession(f, t)
	if err != nil {
		return 2, fmt.Errorf("ssh: %w", err)
	}
	if f.localSSH {
		args := s.localArgs()
		args = append(args, t.user+"@"+t.short(s.c.ns))
		if f.command != "" {
			args = append(args, f.command)
		}
		return runLocal("ssh", args, stdin, stdout)
	}
	client, err := s.connect()
	if err != nil {
		return 1, err
	}
	defer func() { _ = client.Close() }() // the session's status is what counts
	sess, err := client.NewSession()
	if err != nil {
		return 1, fmt.Errorf("ssh: %w", err)
	}
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, stdout, os.Stderr
	if f.command != "" {
		err = sess.Run(f.command)
	} else {
		if err = sess.Shell(); err == nil {
			err = sess.Wait()
		}
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("ssh: %w", err)
	}
	return 0, nil
}

// localArgs are the local ssh's (and scp's) options: virtctl itself as
// the ProxyCommand, the identity and known hosts files if given, then
// --local-ssh-opts. The ProxyCommand's virtctl finds the cluster as one
// without --kubeconfig does (KUBECONFIG, ~/.kube/config).
func (s *sshSession) localArgs() []string {
	self, err := os.Executable()
	if err != nil {
		self = "virtctl"
	}
	proxy := fmt.Sprintf("%s port-forward --stdio %s %d", shellQuote(self), s.target.short(s.c.ns), s.f.port)
	args := []string{"-o", "ProxyCommand=" + proxy}
	if s.f.identity != "" {
		args = append(args, "-i", s.f.identity)
	}
	if s.f.knownHosts != "" {
		args = append(args, "-o", "UserKnownHostsFile="+s.f.knownHosts)
	}
	return append(args, s.f.localOpts...)
}

// runLocal runs the local ssh or scp and returns its exit status.
func runLocal(prog string, args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	// Literal program names: test/hosttools checks that deps.list names
	// every program run.
	var cmd *exec.Cmd
	if prog == "scp" {
		cmd = exec.Command("scp", args...)
	} else {
		cmd = exec.Command("ssh", args...)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 1, fmt.Errorf("%s: %w", prog, err)
	}
	return 0, nil
}

// scp is `virtctl scp [flags] SRC DST`: one regular file to or from
// the guest, one side local and the other [user@]type/name[.namespace]:PATH,
// over scp's original protocol (the guest runs `scp -t` or `scp -f`).
func (c *apiClient) scp(f sshFlags, src, dst string, stdin io.Reader, stdout io.Writer) (int, error) {
	pos := []string{src, dst}
	srcT, srcPath, srcRemote := splitRemote(pos[0])
	dstT, dstPath, dstRemote := splitRemote(pos[1])
	if srcRemote == dstRemote {
		return 2, errors.New("scp: one of SRC and DST is [user@]type/name[.namespace]:PATH, the other a local path")
	}
	target, local, remote, toGuest := dstT, pos[0], dstPath, true
	if srcRemote {
		target, local, remote, toGuest = srcT, pos[1], srcPath, false
	}
	t, err := parseVMTarget(target)
	if err != nil {
		return 2, fmt.Errorf("scp: %w", err)
	}
	if remote == "" {
		return 2, fmt.Errorf("scp: %s: the guest's path is empty", target)
	}
	s, err := c.newSSHSession(f, t)
	if err != nil {
		return 2, fmt.Errorf("scp: %w", err)
	}
	if f.localSSH {
		// -O: OpenSSH's scp speaks SFTP by default, which test guests and
		// small servers may lack; the original protocol is what the native
		// client speaks too.
		r := t.user + "@" + t.short(s.c.ns) + ":" + remote
		args := []string{"-O"}
		if f.recursive {
			args = append(args, "-r")
		}
		if f.preserve {
			args = append(args, "-p")
		}
		args = append(args, s.localArgs()...)
		if toGuest {
			args = append(args, local, r)
		} else {
			args = append(args, r, local)
		}
		return runLocal("scp", args, stdin, stdout)
	}
	client, err := s.connect()
	if err != nil {
		return 1, err
	}
	defer func() { _ = client.Close() }() // the copy's result is what counts
	if toGuest {
		err = scpSend(client, local, remote)
	} else {
		err = scpFetch(client, remote, local)
	}
	if err != nil {
		return 1, fmt.Errorf("scp: %w", err)
	}
	return 0, nil
}

// splitRemote reads [user@]type/name[.namespace]:PATH; ok is false for a
// local path (no type/ before the first colon).
func splitRemote(s string) (target, path string, ok bool) {
	target, path, ok = strings.Cut(s, ":")
	if !ok || !strings.Contains(target, "/") {
		return "", "", false
	}
	if _, err := parseVMTarget(target); err != nil {
		return "", "", false
	}
	return target, path, true
}

// scpRemote starts `scp FLAG PATH` in the guest and returns its input,
// its output and the session.
func scpRemote(client *ssh.Client, flag, path string) (*ssh.Session, io.WriteCloser, *bufio.Reader, error) {
	sess, err := client.NewSession()
	if err != nil {
		return nil, nil, nil, err
	}
	in, err := sess.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	var stderr strings.Builder
	sess.Stderr = &stderr
	if err := sess.Start("scp " + flag + " " + shellQuote(path)); err != nil {
		return nil, nil, nil, err
	}
	return sess, in, bufio.NewReader(out), nil
}

// scpSend copies the local regular file to the guest's path (a file, or a
// directory to put it in).
func scpSend(client *ssh.Client, local, remote string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read side: nothing to lose
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (directories are not supported)", local)
	}
	sess, in, out, err := scpRemote(client, "-t", remote)
	if err != nil {
		return err
	}
	defer func() { _ = sess.Close() }()
	if err := scpAck(out); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(in, "C%04o %d %s\n", fi.Mode().Perm(), fi.Size(), filepath.Base(local)); err != nil {
		return err
	}
	if err := scpAck(out); err != nil {
		return err
	}
	if _, err := io.CopyN(in, f, fi.Size()); err != nil {
		return fmt.Errorf("%s: %w", local, err)
	}
	if _, err := in.Write([]byte{0}); err != nil {
		return err
	}
	if err := scpAck(out); err != nil {
		return err
	}
	_ = in.Close() // EOF: the guest's scp ends
	return sess.Wait()
}

// scpFetch copies the guest's regular file at remote to local (a file, or
// a directory to put it in).
func scpFetch(client *ssh.Client, remote, local string) error {
	sess, in, out, err := scpRemote(client, "-f", remote)
	if err != nil {
		return err
	}
	defer func() { _ = sess.Close() }()
	if _, err := in.Write([]byte{0}); err != nil {
		return err
	}
	var line string
	for {
		// T (times) may come first; a 1 or 2 is the guest's error.
		if line, err = scpLine(out); err != nil {
			return err
		}
		if line[0] != 'T' {
			break
		}
		if _, err := in.Write([]byte{0}); err != nil {
			return err
		}
	}
	if line[0] == 1 || line[0] == 2 {
		return fmt.Errorf("the guest: %s", strings.TrimSpace(line[1:]))
	}
	mode, size, name, err := parseSCPFileLine(strings.TrimSuffix(line, "\n"))
	if err != nil {
		return err
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, name)
	}
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // closed with its error checked below first
	if _, err := in.Write([]byte{0}); err != nil {
		return err
	}
	if n, err := io.CopyN(f, out, size); err != nil {
		return fmt.Errorf("%s: %d of %d bytes: %w", remote, n, size, err)
	}
	if err := scpAck(out); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := in.Write([]byte{0}); err != nil {
		return err
	}
	_ = in.Close() // EOF: the guest's scp ends
	return sess.Wait()
}

// scpAck reads the guest's answer: 0, or 1/2 and its message.
func scpAck(r *bufio.Reader) error {
	c, err := r.ReadByte()
	if err != nil {
		return fmt.Errorf("the guest's scp: %w", err)
	}
	if c == 0 {
		return nil
	}
	msg, _ := scpLine(r)
	return fmt.Errorf("the guest: %s", strings.TrimSpace(msg))
}

// scpLine reads one protocol line from the guest, at most the reader's
// buffer (4 KiB): a hostile guest can't make virtctl buffer without end.
func scpLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	if err != nil {
		return "", fmt.Errorf("the guest's scp: %w", err)
	}
	return string(b), nil
}

// parseSCPFileLine reads "Cmmmm size name" from the guest: the name must
// be one path element, so a hostile guest can't write elsewhere.
func parseSCPFileLine(line string) (os.FileMode, int64, string, error) {
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 || len(f[0]) < 2 || f[0][0] != 'C' {
		return 0, 0, "", fmt.Errorf("the guest's scp: unexpected %q", line)
	}
	mode, err := strconv.ParseUint(f[0][1:], 8, 32)
	size, serr := strconv.ParseInt(f[1], 10, 64)
	name := f[2]
	if err != nil || serr != nil || size < 0 || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return 0, 0, "", fmt.Errorf("the guest's scp: bad file line %q", line)
	}
	return os.FileMode(mode).Perm(), size, name, nil
}

// shellQuote quotes s for a POSIX shell (the guest's sshd runs commands
// through one).
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// wsConn is a portforward websocket as a net.Conn: the stream's bytes in
// binary messages.
type wsConn struct {
	ws  *websocket.Conn
	buf []byte // what is left of the last message
}

func (w *wsConn) Read(p []byte) (int, error) {
	for len(w.buf) == 0 {
		_, data, err := w.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return 0, io.EOF
			}
			return 0, err
		}
		w.buf = data
	}
	n := copy(p, w.buf)
	w.buf = w.buf[n:]
	return n, nil
}

func (w *wsConn) Write(p []byte) (int, error) {
	if err := w.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *wsConn) Close() error                       { return w.ws.Close() }
func (w *wsConn) LocalAddr() net.Addr                { return w.ws.LocalAddr() }
func (w *wsConn) RemoteAddr() net.Addr               { return w.ws.RemoteAddr() }
func (w *wsConn) SetDeadline(t time.Time) error      { return w.ws.UnderlyingConn().SetDeadline(t) }
func (w *wsConn) SetReadDeadline(t time.Time) error  { return w.ws.SetReadDeadline(t) }
func (w *wsConn) SetWriteDeadline(t time.Time) error { return w.ws.SetWriteDeadline(t) }
