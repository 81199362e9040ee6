package hosttools

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"mvdan.cc/sh/v3/syntax"
)

// use is one place where the repository runs a host program.
type use struct {
	file string
	line int
	prog string
}

// TestEveryProgramHasAPackage is the rule of issue 20: every host program
// the repository runs (from Go, or from the scripts under hack/ and .ci/)
// is named in hack/deps.list, so that the project's own scripts install it
// before it is needed.
func TestEveryProgramHasAPackage(t *testing.T) {
	list, err := loadList()
	require.NoError(t, err)
	byProg, err := providers(list)
	require.NoError(t, err)
	root, err := filepath.Abs(filepath.Join(hackDir(), ".."))
	require.NoError(t, err)

	goUses, err := goPrograms(root)
	require.NoError(t, err)
	shUses, err := shellPrograms(root)
	require.NoError(t, err)
	// Sanity: the scanners see what the repository is known to run.
	assert.Contains(t, progs(goUses), "qemu-img")
	assert.Contains(t, progs(shUses), "apt-get")

	for _, u := range append(goUses, shUses...) {
		if _, ok := byProg[u.prog]; !ok {
			t.Errorf("%s:%d: runs %s, which no set in hack/deps.list provides", u.file, u.line, u.prog)
		}
	}
	all := slices.Compact(slices.Sorted(slices.Values(progs(append(goUses, shUses...)))))
	t.Logf("%d places run %d programs: %s", len(goUses)+len(shUses), len(all), strings.Join(all, " "))
}

func progs(us []use) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.prog)
	}
	return out
}

// TestListIsConsistent: the sets hack/deps.sh never installs say where
// their programs come from instead of naming a package, and every other
// line names a Debian package.
func TestListIsConsistent(t *testing.T) {
	list, err := loadList()
	require.NoError(t, err)
	_, err = providers(list)
	require.NoError(t, err)
	for _, e := range list {
		switch e.set {
		case "toolchain", "built":
			assert.Equal(t, "-", e.pkg, "deps.list:%d: set %s names no package", e.line, e.set)
			assert.NotEmpty(t, e.progs, "deps.list:%d", e.line)
		default:
			assert.NotEqual(t, "-", e.pkg, "deps.list:%d: set %s installs Debian packages", e.line, e.set)
		}
	}
}

// TestBasePackagesAreRequired: the base set is what every Debian system
// has, so hack/deps.sh never installs it; a package of lower priority
// (even "important") may be missing on a fresh machine and belongs in an
// installable set.
func TestBasePackagesAreRequired(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian system: no dpkg-query")
	}
	list, err := loadList()
	require.NoError(t, err)
	for _, e := range list {
		if e.set != "base" {
			continue
		}
		out, err := exec.Command("dpkg-query", "-W", "-f=${Status}|${Priority}|${Essential}", e.pkg).Output()
		if !assert.NoError(t, err, "deps.list:%d: base package %s is not known to dpkg", e.line, e.pkg) {
			continue
		}
		f := strings.Split(string(out), "|")
		require.Len(t, f, 3)
		assert.Equal(t, "install ok installed", f[0], "deps.list:%d: base package %s is not installed on this Debian system", e.line, e.pkg)
		assert.True(t, f[1] == "required" || f[2] == "yes",
			"deps.list:%d: %s is Priority %q, Essential %q: not part of every Debian system; move it to an installable set", e.line, e.pkg, f[1], f[2])
	}
}

// TestProgramsComeFromTheirPackage: for every listed package installed
// here, the programs the list attributes to it are its own (directly or
// through a symlink or an alternative), so installing the set really
// brings them.
func TestProgramsComeFromTheirPackage(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("not a Debian system: no dpkg")
	}
	list, err := loadList()
	require.NoError(t, err)
	checked := 0
	for _, e := range list {
		if e.pkg == "-" || len(e.progs) == 0 {
			continue
		}
		files, err := exec.Command("dpkg", "-L", e.pkg).Output()
		if err != nil {
			continue // not installed here
		}
		own := map[string]bool{}
		for _, f := range strings.Fields(string(files)) {
			if d := filepath.Base(filepath.Dir(f)); d == "bin" || d == "sbin" {
				own[filepath.Base(f)] = true
			}
		}
		for _, p := range e.progs {
			checked++
			if own[p] {
				continue
			}
			// An alternative (awk is mawk's): follow PATH's symlinks.
			path, err := exec.LookPath(p)
			if !assert.NoError(t, err, "deps.list:%d: %s is not a program of %s, nor on PATH", e.line, p, e.pkg) {
				continue
			}
			real, err := filepath.EvalSymlinks(path)
			require.NoError(t, err)
			assert.True(t, own[filepath.Base(real)], "deps.list:%d: %s (%s) is not a program of %s", e.line, p, real, e.pkg)
		}
	}
	t.Logf("%d programs checked against their installed packages", checked)
}

// --- Go: exec.Command and friends ------------------------------------------

// goCalls are the calls that run or look up a program: the function and
// the index of its program argument.
var goCalls = map[string]map[string]int{
	"os/exec": {"Command": 0, "CommandContext": 1, "LookPath": 0},
	"github.com/kubevmm/kubevmm/test/hosttools": {"Require": 1, "Run": 1, "Find": 0},
}

// goPrograms lists the programs named in goCalls in the Go files under
// root. A program argument counts when it is a string literal, a string
// constant of the package, or the variable of a range over a literal list
// of strings; anything built at run time (the vmm binary under test,
// os.Args[0], a path into the repository) is not a host program and is
// skipped.
func goPrograms(root string) ([]use, error) {
	fset := token.NewFileSet()
	files := map[string][]*ast.File{} // by directory
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Go's own rule: testdata, ., _ directories hold no package of
			// the module (testdata programs run inside the guest).
			if n := d.Name(); path != root && (n == "testdata" || n[0] == '.' || n[0] == '_') {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files[filepath.Dir(path)] = append(files[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var uses []use
	for _, fs := range files {
		consts := packageConsts(fs)
		for _, f := range fs {
			uses = append(uses, goFilePrograms(fset, root, f, consts)...)
		}
	}
	return uses, nil
}

// packageConsts are the string constants declared at the top level of a
// package's files.
func packageConsts(files []*ast.File) map[string]string {
	m := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := stringLit(vs.Values[i]); ok {
							m[n.Name] = v
						}
					}
				}
			}
		}
	}
	return m
}

func stringLit(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

func goFilePrograms(fset *token.FileSet, root string, f *ast.File, consts map[string]string) []use {
	// The local names of the imports in goCalls.
	calls := map[string]map[string]int{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if fns, ok := goCalls[p]; ok {
			name := filepath.Base(p)
			if im.Name != nil {
				name = im.Name.Name
			}
			calls[name] = fns
		}
	}
	if len(calls) == 0 {
		return nil
	}
	var uses []use
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok || pkg.Obj != nil { // a local variable, not the import
			return true
		}
		i, ok := calls[pkg.Name][sel.Sel.Name]
		if !ok || i >= len(call.Args) {
			return true
		}
		pos := fset.Position(call.Pos())
		rel, _ := filepath.Rel(root, pos.Filename)
		for _, p := range goStrings(call.Args[i], consts) {
			uses = append(uses, use{file: rel, line: pos.Line, prog: p})
		}
		return true
	})
	return uses
}

// goStrings resolves a program argument to the names it can take; nil if
// it is built at run time.
func goStrings(e ast.Expr, consts map[string]string) []string {
	if s, ok := stringLit(e); ok {
		return []string{s}
	}
	id, ok := e.(*ast.Ident)
	if !ok {
		return nil
	}
	if id.Obj == nil { // declared in another file of the package
		if v, ok := consts[id.Name]; ok {
			return []string{v}
		}
		return nil
	}
	switch d := id.Obj.Decl.(type) {
	case *ast.ValueSpec:
		if id.Obj.Kind != ast.Con {
			return nil
		}
		for i, n := range d.Names {
			if n.Name == id.Name && i < len(d.Values) {
				if s, ok := stringLit(d.Values[i]); ok {
					return []string{s}
				}
			}
		}
	case *ast.AssignStmt:
		// for _, p := range []string{"a", "b"}: the parser records the
		// range as a unary RANGE expression on the right-hand side.
		if len(d.Lhs) != 2 || len(d.Rhs) != 1 {
			return nil
		}
		if v, ok := d.Lhs[1].(*ast.Ident); !ok || v.Name != id.Name {
			return nil
		}
		r, ok := d.Rhs[0].(*ast.UnaryExpr)
		if !ok || r.Op != token.RANGE {
			return nil
		}
		lit, ok := r.X.(*ast.CompositeLit)
		if !ok {
			return nil
		}
		var out []string
		for _, el := range lit.Elts {
			s, ok := stringLit(el)
			if !ok {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	return nil
}

// --- Shell: the scripts under hack/ and .ci/ -------------------------------

// shellBuiltins never run a program of their own (exec, command and eval
// are handled by shellScan).
var shellBuiltins = map[string]bool{}

func init() {
	for _, b := range strings.Fields(`. : [ alias bg bind break builtin caller cd compgen complete continue
		declare dirs disown echo enable exit export false fc fg getopts hash help history jobs kill let
		local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source
		suspend test times trap true type typeset ulimit umask unalias unset wait`) {
		shellBuiltins[b] = true
	}
}

// shellScripts are the files under hack/ and .ci/ that are shell: *.sh,
// or a #! line naming a shell.
func shellScripts(root string) ([]string, error) {
	var out []string
	for _, dir := range []string{"hack", ".ci"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if strings.HasSuffix(path, ".sh") {
				out = append(out, path)
				return nil
			}
			head := make([]byte, 64)
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			n, _ := f.Read(head)
			f.Close()
			first, _, _ := bytes.Cut(head[:n], []byte("\n"))
			if bytes.HasPrefix(first, []byte("#!")) && (bytes.HasSuffix(first, []byte("sh")) || bytes.Contains(first, []byte("sh "))) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func shellPrograms(root string) ([]use, error) {
	paths, err := shellScripts(root)
	if err != nil {
		return nil, err
	}
	var files []*syntax.File
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		f, err := syntax.NewParser().Parse(bytes.NewReader(data), rel)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	s := newShellScan(files)
	var uses []use
	for _, f := range files {
		uses = append(uses, s.file(f)...)
	}
	return uses, nil
}

// shellScan finds the programs scripts run. Functions are shared across
// all the scripts (lib.sh's are sourced by the others); a function that
// runs its own arguments after `shift N` (wait_for, start) makes its
// argument N+1 a program.
type shellScan struct {
	funcs map[string]int // name -> index of the program argument, or -1
}

func newShellScan(files []*syntax.File) *shellScan {
	s := &shellScan{funcs: map[string]int{}}
	for _, f := range files {
		syntax.Walk(f, func(n syntax.Node) bool {
			if fn, ok := n.(*syntax.FuncDecl); ok {
				s.funcs[fn.Name.Value] = runsArgs(fn)
			}
			return true
		})
	}
	return s
}

// runsArgs tells whether a function runs "$@" as a command (directly or
// through a wrapper such as setsid), and after how many shifts.
func runsArgs(fn *syntax.FuncDecl) int {
	shifted, runs := 0, -1
	syntax.Walk(fn.Body, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		name, _ := literal(call.Args[0])
		switch {
		case name == "shift":
			shifted++
			if len(call.Args) > 1 {
				if v, ok := literal(call.Args[1]); ok {
					shifted, _ = strconv.Atoi(v)
				}
			}
		case isAllArgs(call.Args[0]), wrappers[name] && slices.ContainsFunc(call.Args[1:], isAllArgs):
			runs = shifted
		}
		return true
	})
	return runs
}

// wrappers run the command in their arguments.
var wrappers = map[string]bool{"exec": true, "setsid": true, "nohup": true, "env": true, "timeout": true, "xargs": true, "sh": true, "bash": true}

func isAllArgs(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	q, ok := w.Parts[0].(*syntax.DblQuoted)
	if !ok || len(q.Parts) != 1 {
		return false
	}
	p, ok := q.Parts[0].(*syntax.ParamExp)
	return ok && p.Param.Value == "@"
}

// literal is a word's value if it has no expansions.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

func (s *shellScan) file(f *syntax.File) []use {
	var uses []use
	syntax.Walk(f, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok {
			uses = append(uses, s.command(f.Name, int(call.Pos().Line()), call.Args)...)
		}
		return true
	})
	return uses
}

// command returns the programs a simple command runs.
func (s *shellScan) command(file string, line int, args []*syntax.Word) []use {
	if len(args) == 0 {
		return nil // assignments only
	}
	name, ok := literal(args[0])
	if !ok {
		return nil // a variable: the repository's own scripts and binaries, by path
	}
	rest := args[1:]
	switch {
	case name == "exec":
		return s.command(file, line, rest)
	case name == "command":
		if len(rest) > 0 {
			if v, _ := literal(rest[0]); v == "-v" || v == "-V" {
				return nil // a lookup, for programs the script can do without
			}
		}
		return s.command(file, line, rest)
	case name == "eval" || shellBuiltins[name]:
		return nil
	}
	if i, ok := s.funcs[name]; ok {
		if i >= 0 && i < len(rest) {
			return s.command(file, line, rest[i:])
		}
		return nil
	}
	if strings.Contains(name, "/") {
		dir := filepath.Dir(name)
		if dir != "/bin" && dir != "/sbin" && dir != "/usr/bin" && dir != "/usr/sbin" {
			return nil // not a system program
		}
		name = filepath.Base(name)
	}
	uses := []use{{file: file, line: line, prog: name}}
	switch name {
	case "setsid", "nohup", "env", "timeout", "xargs":
		uses = append(uses, s.command(file, line, wrapped(name, rest))...)
	case "sh", "bash":
		// sh -c 'SCRIPT' ...: the script's own commands.
		for i, w := range rest {
			if v, _ := literal(w); v == "-c" && i+1 < len(rest) {
				if script, ok := literal(rest[i+1]); ok {
					if f, err := syntax.NewParser().Parse(strings.NewReader(script), file); err == nil {
						for _, u := range s.file(f) {
							u.line = line
							uses = append(uses, u)
						}
					}
				}
				break
			}
		}
	}
	return uses
}

// wrapped returns the command a wrapper's arguments run: what follows its
// options (and env's assignments, timeout's duration).
func wrapped(wrapper string, args []*syntax.Word) []*syntax.Word {
	withValue := map[string]bool{}
	if wrapper == "xargs" {
		for _, o := range []string{"-n", "-I", "-d", "-L", "-P", "-s", "-E", "-a"} {
			withValue[o] = true
		}
	}
	for i := 0; i < len(args); i++ {
		v, ok := literal(args[i])
		switch {
		case !ok:
			return args[i:]
		case withValue[v]:
			i++
		case strings.HasPrefix(v, "-"), wrapper == "env" && strings.Contains(v, "="):
		case wrapper == "timeout":
			return args[i+1:] // the duration
		default:
			return args[i:]
		}
	}
	return nil
}

// --- the scanners themselves -----------------------------------------------

func TestShellScan(t *testing.T) {
	tests := []struct {
		name, script string
		want         []string
	}{
		{"plain command", "curl -sf https://x", []string{"curl"}},
		{"builtins and the repository's own scripts run nothing", `cd /; echo hi; "$HACK_DIR/deps.sh" net; exec "$bin" "$@"`, nil},
		{"command substitution and pipes", `x=$(seq 3 | sort -u)`, []string{"seq", "sort"}},
		{"system path", "/usr/sbin/ip link show", []string{"ip"}},
		{"wrappers", "xargs -n 1 basename; env A=b go build; timeout 5 ping -c1 x; exec make test",
			[]string{"xargs", "basename", "env", "go", "timeout", "ping", "make"}},
		{"sh -c script", `setsid sh -c 'echo $$ > "$0"; exec socat "$@"' f`, []string{"setsid", "sh", "socat"}},
		{"a lookup is not a use", "command -v iptables >/dev/null || exit 0", nil},
		{"functions run nothing themselves", "log() { printf '%s\\n' \"$*\" >&2; }; log hi", nil},
		{"a function that runs its arguments after shift 2",
			`wait_for() { local what=$1 limit=$2; shift 2; until "$@"; do sleep 0.2; done; }; wait_for api 300 curl -sf x`,
			[]string{"sleep", "curl"}},
		{"through setsid, after one shift",
			`start() { local n=$1; shift; setsid sh -c 'exec "$@"' x "$@" & }; start c containerd --config f`,
			[]string{"setsid", "sh", "containerd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := syntax.NewParser().Parse(strings.NewReader(tc.script), "x.sh")
			require.NoError(t, err)
			assert.Equal(t, tc.want, progs(newShellScan([]*syntax.File{f}).file(f)))
		})
	}
}

func TestGoScan(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string
	}{
		{"literal", `exec.Command("ip", "link")`, []string{"ip"}},
		{"context", `exec.CommandContext(ctx, "socat", "-")`, []string{"socat"}},
		{"lookup", `exec.LookPath("qemu-system-x86_64")`, []string{"qemu-system-x86_64"}},
		{"local constant", `const p = "debugfs"; exec.Command(p)`, []string{"debugfs"}},
		{"constant of another file", `exec.Command(pkgConst)`, []string{"ping"}},
		{"range over a literal list", `for _, p := range []string{"mkfs.ext4", "debugfs"} { hosttools.Require(t, p) }`,
			[]string{"mkfs.ext4", "debugfs"}},
		{"hosttools.Run", `hosttools.Run(t, "qemu-img", "check", f)`, []string{"qemu-img"}},
		{"built at run time", `exec.Command(os.Args[0]); exec.Command(filepath.Join(repo, "hack", "x.sh")); exec.Command(vmmBin)`, nil},
		{"a local variable named exec", `exec := fake{}; exec.Command("x")`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "package p\nimport (\n\"os/exec\"\n\"github.com/kubevmm/kubevmm/test/hosttools\"\n)\nfunc f() {\n" + tc.body + "\n}\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "/r/p.go", src, 0)
			require.NoError(t, err)
			got := goFilePrograms(fset, "/r", f, map[string]string{"pkgConst": "ping"})
			assert.Equal(t, tc.want, progs(got))
		})
	}
}

func TestFind(t *testing.T) {
	p, err := Find("sh")
	require.NoError(t, err)
	assert.True(t, filepath.IsAbs(p), p)
	_, err = Find("kubevmm-no-such-program")
	assert.ErrorContains(t, err, "kubevmm-no-such-program is not installed, and hack/deps.list names no package for it")
}
