package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kubevmmOnly are the commands kubevmm's virtctl has and upstream's has
// not, and why.
var kubevmmOnly = map[string]string{
	"process": "oc process, for the SSP's common templates (OpenShift Templates); upstream's `template process` takes " +
		"VirtualMachineTemplates, a kind kubevmm does not serve",
}

// helpPage is what a command's help lists: its subcommands and its own
// flags ("-s, --name type", as the help spells them; the global flags are
// `options`'s page).
type helpPage struct {
	commands map[string]string // name: its one-line description
	flags    []string
}

var (
	commandLine = regexp.MustCompile(`^  (\S+) +(.*)$`)
	// pflag's layout: "  -s, --name type   usage" or "      --name type   usage";
	// a usage's later lines are indented further.
	flagLine = regexp.MustCompile(`^  (?:(-\S), |    )(--\S+)(?: (\S+))?(?: {2,}|$)`)
)

func parseHelp(text string) helpPage {
	p := helpPage{commands: map[string]string{}}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case line == "Available Commands:", line == "Flags:", strings.HasPrefix(line, "The following options can be passed"):
			section = line
		case line == "":
			if section != "The following options can be passed to any command:" {
				section = ""
			}
		case section == "Available Commands:":
			if m := commandLine.FindStringSubmatch(line); m != nil {
				p.commands[m[1]] = m[2]
			}
		case section != "":
			if m := flagLine.FindStringSubmatch(line); m != nil {
				p.flags = append(p.flags, strings.TrimSpace(strings.Join([]string{m[1], m[2], m[3]}, " ")))
			}
		}
	}
	slices.Sort(p.flags)
	return p
}

// walk reads the help of the command at path and of every command under
// it, into pages by path ("" is the root).
func walk(t *testing.T, help func(args ...string) string, path []string, pages map[string]helpPage) {
	t.Helper()
	p := parseHelp(help(append(slices.Clone(path), "--help")...))
	pages[strings.Join(path, " ")] = p
	for name := range p.commands {
		if name != "help" {
			walk(t, help, append(slices.Clone(path), name), pages)
		}
	}
}

// upstreamVirtctl is upstream's virtctl, built by hack/upstream-virtctl.sh
// if it is not yet (a cold build: about 4 minutes on 2 idle cores).
func upstreamVirtctl(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../../hack/upstream-virtctl.sh")
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", script, stderr.String())
	return strings.TrimSpace(string(out))
}

// TestCommandsMatchUpstream runs upstream's virtctl and ours side by side,
// with no cluster and no kubeconfig: every command and subcommand of one
// is the other's, with the same flags (names, shorthands, types), and
// `options` lists the same global flags. A command of upstream's that
// kubevmm does not implement says so in its help, and refuses to run in
// one line naming it.
func TestCommandsMatchUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds upstream's virtctl the first time (minutes)")
	}
	bin := upstreamVirtctl(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "no-such-kubeconfig"))

	upstream := map[string]helpPage{}
	walk(t, func(args ...string) string { return runUpstream(t, bin, args...) }, nil, upstream)
	ours := map[string]helpPage{}
	walk(t, func(args ...string) string {
		var out bytes.Buffer
		code, err := run(args, nil, &out)
		require.NoError(t, err, "virtctl %s", strings.Join(args, " "))
		require.Equal(t, 0, code, "virtctl %s", strings.Join(args, " "))
		return out.String()
	}, nil, ours)
	upstream["options"] = parseHelp(runUpstream(t, bin, "options"))
	var out bytes.Buffer
	_, err := run([]string{"options"}, nil, &out)
	require.NoError(t, err)
	ours["options"] = parseHelp(out.String())
	require.NotEmpty(t, upstream["options"].flags, "upstream's options page")

	var table strings.Builder
	fmt.Fprintf(&table, "%-32s %-9s %-9s %s\n", "command", "upstream", "kubevmm", "")
	for _, path := range slices.Sorted(keysOf(upstream, ours)) {
		up, inUp := upstream[path]
		our, inOurs := ours[path]
		name := path
		if name == "" {
			name = "(virtctl)"
		}
		note := ""
		switch {
		case !inOurs:
			note = "MISSING"
			t.Errorf("upstream's virtctl has %q, ours has not", path)
		case !inUp:
			note = "kubevmm's own"
			if _, ok := kubevmmOnly[strings.Fields(path)[0]]; !ok {
				t.Errorf("ours has %q, upstream's has not (and kubevmmOnly does not say why)", path)
			}
		case unsupportedHere(ours, path):
			note = "not supported by kubevmm"
			checkRefuses(t, path)
		default:
			if !assert.Equal(t, up.flags, our.flags, "the flags of %q (upstream's, ours)", path) {
				note = "FLAGS DIFFER"
			}
		}
		fmt.Fprintf(&table, "%-32s %-9s %-9s %s\n", name, count(inUp, up), count(inOurs, our), note)
	}
	t.Logf("commands and flags, side by side (flags counted):\n%s", table.String())
}

func runUpstream(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "upstream virtctl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func keysOf(maps ...map[string]helpPage) func(func(string) bool) {
	seen := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			seen[k] = true
		}
	}
	return func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}
}

func count(ok bool, p helpPage) string {
	if !ok {
		return "-"
	}
	return fmt.Sprint(len(p.flags))
}

// unsupportedHere says whether our help lists the command at path as not
// supported by kubevmm.
func unsupportedHere(pages map[string]helpPage, path string) bool {
	i := strings.LastIndex(path, " ")
	parent, name := "", path
	if i >= 0 {
		parent, name = path[:i], path[i+1:]
	}
	return strings.HasSuffix(pages[parent].commands[name], "(not supported by kubevmm).")
}

// checkRefuses runs a command kubevmm does not implement, with an
// argument and a flag of upstream's: it fails, in one line naming it.
func checkRefuses(t *testing.T, path string) {
	t.Helper()
	args := append(strings.Fields(path), "vm1", "--address=0.0.0.0")
	var out bytes.Buffer
	code, err := run(args, nil, &out)
	assert.NotEqual(t, 0, code, "virtctl %s", strings.Join(args, " "))
	if assert.Error(t, err, "virtctl %s", strings.Join(args, " ")) {
		assert.Equal(t, path+" is not supported by kubevmm's virtctl", err.Error())
	}
	assert.Empty(t, out.String())
}

// TestHelpWithoutACluster: -h, --help and `help CMD` print the same help
// for every command, with no cluster and no kubeconfig, and exit 0; so
// does a command that only groups others, run bare.
func TestHelpWithoutACluster(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", filepath.Join(home, "no-such-kubeconfig"))
	virtctl := func(args ...string) string {
		var out bytes.Buffer
		code, err := run(args, nil, &out)
		require.NoError(t, err, "virtctl %s", strings.Join(args, " "))
		require.Equal(t, 0, code, "virtctl %s", strings.Join(args, " "))
		return out.String()
	}
	pages := map[string]helpPage{}
	walk(t, func(args ...string) string { return virtctl(args...) }, nil, pages)
	require.Contains(t, pages, "image-upload")
	require.Contains(t, pages, "soft-reboot")
	for path := range pages {
		if path == "" {
			continue
		}
		args := strings.Fields(path)
		long := virtctl(append(slices.Clone(args), "--help")...)
		if args[0] != "completion" { // cobra's own, laid out as the root's (as upstream's)
			assert.Contains(t, long, "Usage:\n  virtctl "+path, path)
		}
		assert.Equal(t, long, virtctl(append(slices.Clone(args), "-h")...), "%s -h", path)
		assert.Equal(t, long, virtctl(append([]string{"help"}, args...)...), "help %s", path)
	}
	for _, group := range []string{"create", "adm", "credentials", "template"} {
		assert.Contains(t, virtctl(group), "Available Commands:", group)
	}
	root := virtctl()
	assert.True(t, strings.HasPrefix(root, "Available Commands:\n"), root)
	assert.Equal(t, "virtctl controls virtual machines on Kubernetes: kubevmm's, through the KubeVirt API.\n\n"+root, virtctl("--help"))
}
