// Package hosttools gives tests, the e2e and the bench the host programs
// they drive (qemu-img, mkfs.ext4, ip, ping, ...), installing the Debian
// packages that provide them through hack/deps.sh when they are missing.
// Which set provides which program is hack/deps.list, the one place that
// says so.
package hosttools

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// notInstalled are the sets of deps.list that hack/deps.sh never installs
// (see the top of that file).
var notInstalled = map[string]string{
	"base":      "Debian's base system",
	"toolchain": "the Go toolchain",
	"built":     "hack/cluster/build.sh",
}

// entry is one line of deps.list.
type entry struct {
	set, pkg string
	progs    []string
	line     int
}

func hackDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "../../hack")
}

// parseList reads deps.list: "SET PACKAGE [PROGRAM...]" per line, # comments.
func parseList(data []byte) ([]entry, error) {
	var list []entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) == 1:
			return nil, fmt.Errorf("deps.list:%d: want SET PACKAGE [PROGRAM...], got %q", n, line)
		}
		list = append(list, entry{set: f[0], pkg: f[1], progs: f[2:], line: n})
	}
	return list, sc.Err()
}

func loadList() ([]entry, error) {
	data, err := os.ReadFile(filepath.Join(hackDir(), "deps.list"))
	if err != nil {
		return nil, fmt.Errorf("hosttools: %w", err)
	}
	return parseList(data)
}

// providers maps each program to the line of deps.list that names it.
func providers(list []entry) (map[string]entry, error) {
	m := map[string]entry{}
	for _, e := range list {
		for _, p := range e.progs {
			if prev, dup := m[p]; dup {
				return nil, fmt.Errorf("deps.list:%d: %s is already provided by %s (line %d)", e.line, p, prev.pkg, prev.line)
			}
			m[p] = e
		}
	}
	return m, nil
}

// Find returns the path of prog, first installing the hack/deps.list set
// that provides it if it is missing.
func Find(prog string) (string, error) {
	if p, err := exec.LookPath(prog); err == nil {
		return p, nil
	}
	list, err := loadList()
	if err != nil {
		return "", err
	}
	byProg, err := providers(list)
	if err != nil {
		return "", fmt.Errorf("hosttools: %w", err)
	}
	e, ok := byProg[prog]
	if !ok {
		return "", fmt.Errorf("%s is not installed, and hack/deps.list names no package for it", prog)
	}
	if from, ok := notInstalled[e.set]; ok {
		return "", fmt.Errorf("%s is not installed (it comes from %s: %s)", prog, from, e.pkg)
	}
	cmd := exec.Command(filepath.Join(hackDir(), "deps.sh"), e.set)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s is missing and hack/deps.sh %s failed: %w", prog, e.set, err)
	}
	p, err := exec.LookPath(prog)
	if err != nil {
		return "", fmt.Errorf("hack/deps.sh %s installed %s, still no %s: %w", e.set, e.pkg, prog, err)
	}
	return p, nil
}

// Require is Find for tests: the test fails if prog can't be had.
func Require(t testing.TB, prog string) string {
	t.Helper()
	p, err := Find(prog)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Run runs a host command and fails the test with its output on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(Require(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
