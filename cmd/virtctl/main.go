// Command virtctl is kubevmm's virtctl: the KubeVirt client for the
// subresources.kubevirt.io API, speaking to the API server with the
// user's kubeconfig, so the same URLs (and RBAC) as KubeVirt's apply.
//
//	virtctl [-n NS] [--kubeconfig F] start|stop|restart|migrate VM
//	virtctl [-n NS] pause|unpause vm|vmi NAME
//	virtctl [-n NS] reset|softreboot VMI
//	virtctl [-n NS] console VMI      (Ctrl+] ends it)
//	virtctl [-n NS] create vm|instancetype|preference [flags]   (prints YAML; see create.go)
//	virtctl [-n NS] process TEMPLATE|-f FILE [-p NAME=VALUE]... [-o json|yaml]   (process.go)
//	virtctl [-n NS] guestosinfo|userlist|fslist VMI
//	virtctl [-n NS] port-forward [--address A] [--stdio] [vm/|vmi/]NAME[.NS] [LOCAL:]REMOTE...
//	virtctl [-n NS] ssh|scp [flags] ...  (ssh.go)
//	virtctl version [-c]
//	virtctl [-n NS] image-upload dv|pvc NAME --image-path=FILE [--size=SIZE] ...  (imageupload.go)
//	virtctl [-n NS] addvolume|removevolume VMI --volume-name=NAME [--persist] [--dry-run]  (hotplug.go)
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/term"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/version"
)

func main() {
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "virtctl:", err)
	}
	os.Exit(code)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `virtctl controls KubeVirt virtual machines (kubevmm).

usage: virtctl [-n NAMESPACE] [--kubeconfig FILE] COMMAND
  start VM          start a VirtualMachine
  stop VM           stop a VirtualMachine
  restart VM        restart a VirtualMachine
  migrate VM        live-migrate a VirtualMachine's instance
  pause vm|vmi NAME, unpause vm|vmi NAME
  reset VMI         hard-reset a VirtualMachineInstance: its guest boots again
  softreboot VMI    ask a VirtualMachineInstance's guest to reboot (ACPI)
  console VMI       connect to the serial console (Ctrl+] to quit)
  create vm|instancetype|preference [flags]
                    print a manifest (virtctl create vm --instancetype u1.small
                    --preference linux --volume-containerdisk src:IMAGE | kubectl apply -f -)
  process TEMPLATE [-p NAME=VALUE]... [-o json|yaml], process -f FILE [...]
                    print a template's objects, parameters substituted, as a List
                    (virtctl process fedora-server-small -p NAME=vm1 | kubectl apply -f -)
  guestosinfo VMI   what the guest agent reports (OS, agent, users, filesystems)
  userlist VMI      the users logged in to the guest (guest agent)
  fslist VMI        the guest's filesystems (guest agent)
  port-forward [--address ADDR] [--stdio] [vm/|vmi/]NAME[.NAMESPACE] [LOCAL:]REMOTE...
                    forward local TCP ports (on ADDR, default 127.0.0.1) to the guest's;
                    --stdio: one port, over stdin and stdout (an ssh ProxyCommand)
  ssh [flags] [USER@]vm|vmi/NAME[.NAMESPACE]    (see ssh.go)
  scp [flags] SRC DST   one file, one side [USER@]vm|vmi/NAME[.NAMESPACE]:PATH
                    flags: -i KEY, -l USER, -p PORT (22), -c CMD (ssh), --known-hosts FILE,
                    --local-ssh (run the local ssh/scp), -t/--local-ssh-opts OPT
  version [-c]      client and server versions (-c: the client's only)
  image-upload dv|pvc NAME --image-path=FILE [--size=SIZE] [--no-create] [--insecure]
                    [--uploadproxy-url=URL] [--storage-class=SC] [--access-mode=MODE]
                    [--volume-mode=block|filesystem] [--block-volume] [--wait-secs=N] [--retry=N]
                    upload a disk image (raw or qcow2, plain, gz or xz) into a DataVolume or PVC
  addvolume VMI --volume-name=NAME [--persist] [--bus=scsi] [--dry-run]
                    hot-plug a DataVolume or PVC into a running VMI as a SCSI disk
                    (--persist: into its VM's spec too)
  removevolume VMI --volume-name=NAME [--persist] [--dry-run]
                    unplug a hot-plugged volume
`)
}

// newAPIClient talks to the cluster kubeconfig (or the default loading
// rules) names, in namespace ns or the kubeconfig's.
func newAPIClient(ns, kubeconfig string) (*apiClient, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	if ns == "" {
		var err error
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("namespace: %w", err)
		}
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &apiClient{cfg: cfg, ns: ns}, nil
}

func run(args []string, stdin *os.File, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("virtctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ns, kubeconfig string
	fs.StringVar(&ns, "n", "", "namespace")
	fs.StringVar(&ns, "namespace", "", "namespace")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0, nil
		}
		return 2, err
	}
	rest_ := fs.Args()
	if len(rest_) == 0 {
		usage(os.Stderr)
		return 2, nil
	}
	cmd, rest_ := rest_[0], rest_[1:]
	if cmd == "help" {
		usage(stdout)
		return 0, nil
	}

	if cmd == "create" {
		// Prints a manifest: no cluster needed.
		return create(rest_, ns, stdout)
	}
	if cmd == "process" {
		// Reads the template from the cluster, or a file with no cluster.
		return processTemplate(rest_, ns, kubeconfig, stdin, stdout)
	}

	c, err := newAPIClient(ns, kubeconfig)
	if err != nil {
		return 1, err
	}
	return c.command(cmd, rest_, stdin, stdout)
}

// command runs one virtctl command against the cluster.
func (c *apiClient) command(cmd string, rest_ []string, stdin *os.File, stdout io.Writer) (int, error) {
	need := func(n int, what string) error {
		if len(rest_) != n {
			return fmt.Errorf("%s: want %s", cmd, what)
		}
		return nil
	}
	switch cmd {
	case "start", "stop", "restart", "migrate":
		if err := need(1, "VM"); err != nil {
			return 2, err
		}
		if err := c.put(context.Background(), "virtualmachines", rest_[0], cmd); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "VM %s was scheduled to %s\n", rest_[0], cmd)
	case "pause", "unpause":
		if err := need(2, "vm|vmi NAME"); err != nil {
			return 2, err
		}
		kind := map[string]string{"vm": "virtualmachines", "vmi": "virtualmachineinstances"}[strings.ToLower(rest_[0])]
		if kind == "" {
			return 2, fmt.Errorf("%s: %q is not vm or vmi", cmd, rest_[0])
		}
		if err := c.put(context.Background(), kind, rest_[1], cmd); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "VMI %s was scheduled to %s\n", rest_[1], cmd)
	case "reset", "softreboot":
		if err := need(1, "VMI"); err != nil {
			return 2, err
		}
		if err := c.put(context.Background(), "virtualmachineinstances", rest_[0], cmd); err != nil {
			return 1, err
		}
		fmt.Fprintf(stdout, "VMI %s was scheduled to %s\n", rest_[0], cmd)
	case "console":
		if err := need(1, "VMI"); err != nil {
			return 2, err
		}
		return c.console(rest_[0], stdin, stdout)
	case "port-forward":
		return c.portForward(rest_, stdin, stdout)
	case "ssh", "scp":
		return c.sshOrSCP(cmd, rest_, stdin, stdout)
	case "guestosinfo", "userlist", "fslist":
		return c.guestAgent(context.Background(), cmd, rest_, stdout)
	case "version":
		return c.version(rest_, stdout)
	case "image-upload":
		return c.imageUpload(rest_, stdout)
	case "addvolume", "removevolume":
		return c.volume(cmd, rest_, stdout)
	default:
		usage(os.Stderr)
		return 2, fmt.Errorf("unknown command %q", cmd)
	}
	return 0, nil
}

type apiClient struct {
	cfg *rest.Config
	ns  string
}

func (c *apiClient) url(kind, name, sub string) string {
	return fmt.Sprintf("%s/apis/%s/namespaces/%s/%s/%s/%s", strings.TrimSuffix(c.cfg.Host, "/"), v1.SubresourceGroupVersion.String(), c.ns, kind, name, sub)
}

func (c *apiClient) do(ctx context.Context, method, url string, body io.Reader) ([]byte, error) {
	hc, err := rest.HTTPClientFor(c.cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read side: nothing to lose
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return nil, statusError(resp.StatusCode, b)
	}
	return b, nil
}

// statusError prints the server's metav1.Status message, as virtctl does.
func statusError(code int, body []byte) error {
	var st metav1.Status
	if err := jsonUnmarshal(body, &st); err == nil && st.Message != "" {
		return errors.New(st.Message)
	}
	return fmt.Errorf("the server answered %d: %s", code, strings.TrimSpace(string(body)))
}

func (c *apiClient) put(ctx context.Context, kind, name, sub string) error {
	_, err := c.do(ctx, http.MethodPut, c.url(kind, name, sub), bytes.NewReader([]byte("{}")))
	if err != nil {
		return fmt.Errorf("%s %s: %w", sub, name, err)
	}
	return nil
}

func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, strings.TrimSuffix(c.cfg.Host, "/")+path, nil)
}

// version prints the client's and the server's version.Info as
// KubeVirt's virtctl does; -c (--client) leaves the server out.
func (c *apiClient) version(args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var clientOnly bool
	fs.BoolVar(&clientOnly, "c", false, "client version only")
	fs.BoolVar(&clientOnly, "client", false, "client version only")
	if err := fs.Parse(args); err != nil {
		return 2, fmt.Errorf("version: %w", err)
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("version: unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(stdout, "Client Version: %#v\n", version.Get())
	if clientOnly {
		return 0, nil
	}
	b, err := c.get(context.Background(), "/apis/"+v1.SubresourceGroupVersion.String()+"/version")
	if err != nil {
		return 1, err
	}
	var server version.Info
	if err := jsonUnmarshal(b, &server); err != nil {
		return 1, fmt.Errorf("server version: %w", err)
	}
	fmt.Fprintf(stdout, "Server Version: %#v\n", server)
	return 0, nil
}

// dial opens the websocket of a streaming subresource (console,
// portforward/...) of kind/name through the API server.
func (c *apiClient) dial(kind, name, sub string) (*websocket.Conn, error) {
	tlsCfg, err := rest.TLSConfigFor(c.cfg)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	if c.cfg.BearerToken != "" {
		hdr.Set("Authorization", "Bearer "+c.cfg.BearerToken)
	} else if c.cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(c.cfg.BearerTokenFile); err == nil {
			hdr.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
		}
	}
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{v1.ConsoleSubprotocol}, HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment}
	url := "wss" + strings.TrimPrefix(c.url(kind, name, sub), "https")
	ws, resp, err := d.Dial(url, hdr)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, statusError(resp.StatusCode, b)
		}
		return nil, err
	}
	return ws, nil
}

// console attaches the terminal to the VMI's serial console over a
// websocket through the API server.
func (c *apiClient) console(name string, stdin *os.File, stdout io.Writer) (int, error) {
	ws, err := c.dial("virtualmachineinstances", name, "console")
	if err != nil {
		return 1, fmt.Errorf("console %s: %w", name, err)
	}
	defer ws.Close()
	interactive := term.IsTerminal(int(stdin.Fd()))
	if interactive {
		old, err := term.MakeRaw(int(stdin.Fd()))
		if err == nil {
			// Best effort on the way out: a terminal gone needs no restoring.
			defer func() { _ = term.Restore(int(stdin.Fd()), old) }()
		}
		fmt.Fprintf(os.Stderr, "Successfully connected to %s console. The escape sequence is ^]\r\n", name)
	}
	done := make(chan error, 2)
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				done <- nil
				return
			}
			if _, err := stdout.Write(data); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				data := buf[:n]
				if i := bytes.IndexByte(data, 0x1d); i >= 0 && interactive { // Ctrl+]
					if i > 0 {
						// Leaving anyway: what precedes ^] is best effort.
						_ = ws.WriteMessage(websocket.BinaryMessage, data[:i])
					}
					done <- nil
					return
				}
				if err := ws.WriteMessage(websocket.BinaryMessage, data); err != nil {
					done <- nil
					return
				}
			}
			if err != nil {
				// stdin ended (not a terminal): keep showing output.
				return
			}
		}
	}()
	if err := <-done; err != nil {
		return 1, err
	}
	return 0, nil
}
