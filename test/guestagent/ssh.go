package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
)

// sshServer is the test guest's SSH server (kubevmm-agent -ssh): public-key
// authentication against an authorized_keys file for root, the guest's only
// user; sessions run a command (exec) or a shell without a pty through
// busybox sh, in root's home, and `scp -t`/`scp -f` for one regular file are served here,
// as busybox has no scp. No pty, no port forwarding, no subsystems (so no
// SFTP: OpenSSH's scp needs -O, its original protocol).
type sshServer struct {
	cfg            *ssh.ServerConfig
	authorizedKeys string
	shell          string
	home           string // commands run here; relative scp paths are under it
}

// newSSHServer makes a server with a fresh ed25519 host key that accepts
// the keys in the authorizedKeys file, read at every attempt (so keys
// written after the start count), and runs commands with shell -c in home.
func newSSHServer(authorizedKeys, shell, home string) (*sshServer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	s := &sshServer{authorizedKeys: authorizedKeys, shell: shell, home: home}
	s.cfg = &ssh.ServerConfig{PublicKeyCallback: s.checkKey}
	s.cfg.AddHostKey(signer)
	return s, nil
}

func (s *sshServer) checkKey(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if md.User() != "root" {
		return nil, fmt.Errorf("user %q: the test guest has only root", md.User())
	}
	b, err := os.ReadFile(s.authorizedKeys)
	if err != nil {
		return nil, fmt.Errorf("authorized keys: %w", err)
	}
	want := key.Marshal()
	for len(b) > 0 {
		k, _, _, rest, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			break // no more keys this parser reads
		}
		if string(k.Marshal()) == string(want) {
			return nil, nil
		}
		b = rest
	}
	return nil, errors.New("unknown public key")
}

// serve accepts connections until l fails.
func (s *sshServer) serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go s.handle(c)
	}
}

func (s *sshServer) handle(c net.Conn) {
	defer func() { _ = c.Close() }() // the connection is over either way
	conn, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return // a failed handshake or authentication: nothing to serve
	}
	defer func() { _ = conn.Close() }()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.session(ch, creqs)
	}
}

// session serves one session channel: its first exec or shell request
// runs, then the channel closes with the exit status.
func (s *sshServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer func() { _ = ch.Close() }()
	for req := range reqs {
		var command string
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			command = p.Command
		case "shell":
		default: // env, pty-req, subsystem, ...: not served
			if req.WantReply {
				_ = req.Reply(false, nil)
			}
			continue
		}
		_ = req.Reply(true, nil)
		go ssh.DiscardRequests(reqs) // signals, window changes: not served
		status := s.run(ch, command)
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}

// run runs command (a shell without one) on ch and returns its exit status.
func (s *sshServer) run(ch ssh.Channel, command string) uint32 {
	if args, err := shellWords(command); err == nil && len(args) > 0 && args[0] == "scp" {
		if err := scpServe(ch, s.home, args[1:]); err != nil {
			fmt.Fprintf(ch.Stderr(), "scp: %v\n", err)
			return 1
		}
		return 0
	}
	cmd := exec.Command(s.shell)
	if command != "" {
		cmd = exec.Command(s.shell, "-c", command)
	}
	cmd.Dir = s.home
	cmd.Env = append(os.Environ(), "HOME="+s.home)
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintf(ch.Stderr(), "%v\n", err)
		return 255
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(ch.Stderr(), "%v\n", err)
		return 255
	}
	// The client's input until its EOF; a command that ends first makes the
	// pipe's writes fail, which ends the copy.
	go func() {
		_, _ = io.Copy(stdin, ch)
		_ = stdin.Close()
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return uint32(ee.ExitCode())
	default: // killed by a signal, or its output could not be sent
		return 255
	}
}

// shellWords splits a command line as sh does for the words scp's clients
// send: blanks separate words; single quotes, double quotes (no
// expansions) and backslashes quote. Anything else is for the shell.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in := false // inside a word
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
			continue
		case c == '\\':
			if i++; i == len(s) {
				return nil, errors.New("a trailing backslash")
			}
			w.WriteByte(s[i])
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, errors.New("an unterminated quote")
			}
			w.WriteString(s[i+1 : i+1+j])
			i += 1 + j
		case strings.IndexByte("$`;&|<>(){}*?[~#", c) >= 0:
			return nil, fmt.Errorf("%q is for the shell", c)
		default:
			w.WriteByte(c)
		}
		in = true
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}

// scpServe is the remote side of scp's original protocol for one regular
// file: `scp -t PATH` receives it (sink), `scp -f PATH` sends it (source);
// a relative PATH is under home. Flags other than -t/-f (-p, -v, -d, --)
// change nothing here; -r is refused.
func scpServe(ch ssh.Channel, home string, args []string) error {
	var sink, source bool
	var paths []string
	for i, a := range args {
		if a == "--" {
			paths = append(paths, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			paths = append(paths, a)
			continue
		}
		for _, f := range a[1:] {
			switch f {
			case 't':
				sink = true
			case 'f':
				source = true
			case 'r':
				return errors.New("directories (-r) are not supported")
			}
		}
	}
	if len(paths) != 1 || paths[0] == "" || sink == source {
		return errors.New("want -t or -f and one path")
	}
	path := paths[0]
	if !filepath.IsAbs(path) {
		path = filepath.Join(home, path)
	}
	if sink {
		return scpSink(ch, path)
	}
	return scpSource(ch, path)
}

// scpReply sends a protocol error to the other side (a line after \x01)
// and returns it.
func scpReply(w io.Writer, err error) error {
	_, _ = fmt.Fprintf(w, "\x01scp: %v\n", err)
	return err
}

func scpSink(ch ssh.Channel, path string) error {
	r := bufio.NewReader(ch)
	if _, err := ch.Write([]byte{0}); err != nil {
		return err
	}
	for {
		line, err := readSCPLine(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return scpReply(ch, err)
		}
		switch line[0] {
		case 'T': // times: not kept
			if _, err := ch.Write([]byte{0}); err != nil {
				return err
			}
		case 'C':
			mode, size, name, err := parseSCPFile(line)
			if err != nil {
				return scpReply(ch, err)
			}
			if err := scpReceive(ch, r, path, name, mode, size); err != nil {
				return scpReply(ch, err)
			}
		default:
			return scpReply(ch, fmt.Errorf("unsupported request %q (one regular file only)", line))
		}
	}
}

// scpReceive writes one file's size bytes from r to path (or path/name if
// path is a directory), acknowledging as scp's sink does.
func scpReceive(ch ssh.Channel, r *bufio.Reader, path, name string, mode os.FileMode, size int64) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, name)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // closed with an error checked below first
	if _, err := ch.Write([]byte{0}); err != nil {
		return err
	}
	n, err := io.CopyN(f, r, size)
	if err != nil {
		return fmt.Errorf("%s: %d of %d bytes: %w", path, n, size, err)
	}
	if err := readSCPAck(r); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = ch.Write([]byte{0})
	return err
}

func scpSource(ch ssh.Channel, path string) error {
	r := bufio.NewReader(ch)
	if err := readSCPAck(r); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return scpReply(ch, err)
	}
	defer func() { _ = f.Close() }() // read side: nothing to lose
	fi, err := f.Stat()
	if err != nil {
		return scpReply(ch, err)
	}
	if !fi.Mode().IsRegular() {
		return scpReply(ch, fmt.Errorf("%s: not a regular file", path))
	}
	if _, err := fmt.Fprintf(ch, "C%04o %d %s\n", fi.Mode().Perm(), fi.Size(), filepath.Base(path)); err != nil {
		return err
	}
	if err := readSCPAck(r); err != nil {
		return err
	}
	if _, err := io.CopyN(ch, f, fi.Size()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := ch.Write([]byte{0}); err != nil {
		return err
	}
	return readSCPAck(r)
}

// maxSCPLine bounds a protocol line: a hostile peer can't make us buffer
// without end.
const maxSCPLine = 4096

// readSCPLine reads one protocol line, without its newline.
func readSCPLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		if c == '\n' {
			break
		}
		if b = append(b, c); len(b) > maxSCPLine {
			return "", errors.New("protocol line too long")
		}
	}
	if len(b) == 0 {
		return "", errors.New("empty protocol line")
	}
	return string(b), nil
}

// readSCPAck reads the other side's answer: 0, or 1/2 and a message line.
func readSCPAck(r *bufio.Reader) error {
	c, err := r.ReadByte()
	if err != nil {
		return err
	}
	if c == 0 {
		return nil
	}
	msg, _ := readSCPLine(r)
	return fmt.Errorf("the other side: %s", strings.TrimPrefix(msg, "scp: "))
}

// parseSCPFile reads "Cmmmm size name": the name must be one path element.
func parseSCPFile(line string) (os.FileMode, int64, string, error) {
	f := strings.SplitN(line[1:], " ", 3)
	if len(f) != 3 {
		return 0, 0, "", fmt.Errorf("bad file line %q", line)
	}
	mode, err := strconv.ParseUint(f[0], 8, 32)
	if err != nil || mode > 0o7777 {
		return 0, 0, "", fmt.Errorf("bad file mode in %q", line)
	}
	size, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || size < 0 {
		return 0, 0, "", fmt.Errorf("bad file size in %q", line)
	}
	name := f[2]
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return 0, 0, "", fmt.Errorf("bad file name in %q", line)
	}
	return os.FileMode(mode).Perm(), size, name, nil
}

// installCloudInitKeys writes the SSH keys of a cloud-init metadata file
// (NoCloud's public-keys, ConfigDrive's public_keys: accessCredentials) to
// authorizedKeys, as cloud-init does for the default user.
func installCloudInitKeys(meta, authorizedKeys string) error {
	b, err := os.ReadFile(meta)
	if err != nil {
		return err
	}
	var md struct {
		NoCloud     map[string]string `json:"public-keys"`
		ConfigDrive map[string]string `json:"public_keys"`
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return fmt.Errorf("%s: %w", meta, err)
	}
	var keys strings.Builder
	for _, m := range []map[string]string{md.NoCloud, md.ConfigDrive} {
		for _, k := range m {
			keys.WriteString(strings.TrimSpace(k) + "\n")
		}
	}
	if err := os.MkdirAll(filepath.Dir(authorizedKeys), 0o700); err != nil {
		return err
	}
	return os.WriteFile(authorizedKeys, []byte(keys.String()), 0o600)
}
