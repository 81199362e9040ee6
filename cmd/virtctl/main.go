// Command virtctl is kubevmm's virtctl: the KubeVirt client for the
// subresources.kubevirt.io API, speaking to the API server with the
// user's kubeconfig, so the same URLs (and RBAC) as KubeVirt's apply.
//
// Users switch between this binary and upstream KubeVirt's, so its
// commands, flags and help are upstream's (the release
// hack/upstream-virtctl.sh builds; TestCommandsMatchUpstream compares the
// two binaries), on cobra as upstream's are. A command upstream has and
// kubevmm does not implement refuses by name (unsupported.go), as does a
// flag asking for what kubevmm does not do; `process` (oc process, for the
// SSP's common templates) is kubevmm's own. Help needs no cluster.
//
//	virtctl [-n NS] [--kubeconfig F] start|stop|restart|migrate VM
//	virtctl [-n NS] pause|unpause vm|vmi NAME
//	virtctl [-n NS] reset|soft-reboot VMI
//	virtctl [-n NS] console VMI      (Ctrl+] ends it)
//	virtctl [-n NS] create vm|instancetype|preference [flags]   (prints YAML; create.go)
//	virtctl [-n NS] expand --vm NAME | -f FILE   (expand.go)
//	virtctl [-n NS] process TEMPLATE|-f FILE [-p NAME=VALUE]... [-o json|yaml]   (process.go)
//	virtctl [-n NS] guestosinfo|userlist|fslist VMI
//	virtctl [-n NS] port-forward [--address A] [--stdio] [vm/|vmi/]NAME[.NS] [LOCAL:]REMOTE...
//	virtctl [-n NS] ssh|scp [flags] ...  (ssh.go)
//	virtctl version [-c]
//	virtctl [-n NS] image-upload dv|pvc NAME --image-path=FILE [--size=SIZE] ...  (imageupload.go)
//	virtctl [-n NS] addvolume|removevolume VMI --volume-name=NAME [--persist] [--dry-run]  (hotplug.go)
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "virtctl:", err)
	}
	os.Exit(code)
}

// run runs one virtctl command line and returns its exit status: 0; 1
// when the command failed; 2 for a usage error (an unknown command or
// flag, missing arguments); a remote command's own (ssh -c).
func run(args []string, stdin io.Reader, stdout io.Writer) (int, error) {
	return runWith(&cli{stdin: stdin, stdout: stdout}, args)
}

func runWith(c *cli, args []string) (int, error) {
	root := newRootCommand(c)
	root.SetArgs(args)
	return exitStatus(root.Execute())
}

// cli is what every command shares: its streams, and the cluster that the
// global flags name, connected on first use (help and create need none).
type cli struct {
	stdin     io.Reader
	stdout    io.Writer
	config    clientcmd.ClientConfig // from the global flags (newRootCommand)
	client    *apiClient             // set by a test, else made from config
	verbosity int
}

func (c *cli) apiClient() (*apiClient, error) {
	if c.client == nil {
		ac, err := clientFromConfig(c.config)
		if err != nil {
			return nil, err
		}
		c.client = ac
	}
	return c.client, nil
}

// namespace is the namespace -n names and whether it was given, for the
// commands that print a manifest (the kubeconfig's is not written in).
func (c *cli) namespace() (string, bool) {
	ns, explicit, err := c.config.Namespace()
	return ns, err == nil && explicit
}

// exitError is a command's exit status other than 0 and 1: 2 for a usage
// error, or a remote command's (err nil: nothing to print).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// status is a command's (exit status, error) as its RunE returns it.
func status(code int, err error) error {
	switch {
	case code == 0, code == 1 && err != nil:
		return err // a failure after all (a write) has status 1
	default:
		return &exitError{code: code, err: err}
	}
}

// exitStatus is the process's exit status and message for Execute's error.
func exitStatus(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code, e.err
	}
	return 1, err
}

// runE adapts a command's func returning (exit status, error).
func runE(f func(cmd *cobra.Command, args []string) (int, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error { return status(f(cmd, args)) }
}

// withClient is runE for a command that talks to the cluster.
func (c *cli) withClient(f func(ac *apiClient, cmd *cobra.Command, args []string) (int, error)) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) (int, error) {
		ac, err := c.apiClient()
		if err != nil {
			return 1, err
		}
		return f(ac, cmd, args)
	})
}

// exactArgs wants n positional arguments, described by what in the error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s: want %s", commandName(cmd), what)
		}
		return nil
	}
}

// commandName is the command's path below virtctl: "create vm".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// subcommands is the Args of a command that only groups others: an
// argument that names none of them is an unknown command.
func subcommands(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError("%s", msg)
}

// printUsage is the Run of a command that only groups others, as
// upstream's: its usage, exit status 0.
func printUsage(cmd *cobra.Command, _ []string) { cmd.Print(cmd.UsageString()) }

// groupCommand is a command that only groups others.
func groupCommand(use, short string, sub ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: subcommands, Run: printUsage}
	cmd.AddCommand(sub...)
	return cmd
}

func newRootCommand(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:           "virtctl",
		Short:         "virtctl controls virtual machines on Kubernetes: kubevmm's, through the KubeVirt API.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          subcommands,
		Run:           printUsage,
		// Before any command runs: its flags that ask for what kubevmm
		// does not do are refused by name.
		PersistentPreRunE: refuseUnsupported,
	}
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(os.Stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%s: %w", commandName(cmd), err)
	})
	c.config = c.bindClientFlags(root.PersistentFlags())
	root.SetUsageTemplate(rootUsage)

	root.AddCommand(
		c.addVolumeCommand(),
		c.removeVolumeCommand(),
		c.consoleCommand(),
		c.createCommand(),
		c.expandCommand(),
		c.guestAgentCommand("guestosinfo", "Print what the guest agent reports of the guest's operating system."),
		c.guestAgentCommand("userlist", "Print the users logged in to the guest (guest agent)."),
		c.guestAgentCommand("fslist", "Print the guest's filesystems (guest agent)."),
		c.imageUploadCommand(),
		c.vmCommand("start", "Start a virtual machine."),
		c.vmCommand("stop", "Stop a virtual machine."),
		c.vmCommand("restart", "Restart a virtual machine."),
		c.vmCommand("migrate", "Live-migrate a virtual machine's instance to another node."),
		c.pauseCommand("pause", "Pause a virtual machine: its vCPUs stop, its memory is kept."),
		c.pauseCommand("unpause", "Unpause a paused virtual machine."),
		c.vmiCommand("reset", "Reset a virtual machine instance: its guest boots again at once."),
		c.vmiCommand("soft-reboot", "Ask a virtual machine instance's guest to reboot (guest agent, else ACPI).", "softreboot", "reboot"),
		c.portForwardCommand(),
		c.sshCommand(),
		c.scpCommand(),
		c.versionCommand(),
		c.processCommand(),
	)
	root.AddCommand(unsupportedCommands()...)
	for _, cmd := range root.Commands() {
		setUsageTemplate(cmd)
	}
	root.AddCommand(optionsCommand())
	return root
}

func setUsageTemplate(cmd *cobra.Command) {
	cmd.SetUsageTemplate(commandUsage)
	for _, sub := range cmd.Commands() {
		setUsageTemplate(sub)
	}
}

// bindClientFlags adds the global flags that say which cluster to talk to
// (kubectl's: --kubeconfig, -n, --context, --server, --token, ...) and
// returns the client configuration they make.
func (c *cli) bindClientFlags(fs *pflag.FlagSet) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	overrides := &clientcmd.ConfigOverrides{}
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s"
	clientcmd.BindOverrideFlags(overrides, fs, names)
	// Upstream's log level: kubevmm's virtctl logs nothing more at any
	// level, and takes the flag for the scripts that pass it.
	fs.IntVarP(&c.verbosity, "v", "v", 2, "log level (taken as upstream's; kubevmm's virtctl logs nothing more)")
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

// optionsCommand prints the global flags, as upstream's hidden `options`.
func optionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "options",
		Short:  "Print the flags every command takes.",
		Hidden: true,
		Args:   cobra.NoArgs,
		Run:    printUsage,
	}
	cmd.SetUsageTemplate(optionsUsage)
	return cmd
}

// The help's layout is upstream's: the root lists the commands; each
// command shows its usage, examples, subcommands and own flags; the
// global flags are `virtctl options`.
const (
	rootUsage = `Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}

Use "virtctl <command> --help" for more information about a given command.
Use "virtctl options" for a list of global command-line options (applies to all commands).
`
	commandUsage = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Use "virtctl options" for a list of global command-line options (applies to all commands).{{end}}
`
	optionsUsage = `The following options can be passed to any command:{{if .HasAvailableInheritedFlags}}

{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
`
)
