package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// e2eGuards are the test/e2e helpers that skip a test outside `make e2e`.
var e2eGuards = map[string]bool{"requireE2E": true, "freshNamespace": true}

// sharedNamespaceHelpers are the test/e2e helpers that work in the one
// shared e2e namespace (freshNamespace's), which the tests that run one
// at a time make anew and delete: a parallel test (see test/e2e's package
// comment) must not call them.
var sharedNamespaceHelpers = map[string]bool{
	"freshNamespace": true, "wait": true, "jsonpath": true, "virtctl": true, "console": true,
	"consoleRun": true, "consoleRunThen": true, "applyYAML": true, "diskImage": true,
}

// sharedNamespaceCalls are the calls to sharedNamespaceHelpers in a test
// that calls t.Parallel (none if it does not), closures included.
func sharedNamespaceCalls(body *ast.BlockStmt) []*ast.CallExpr {
	parallel := false
	var shared []*ast.CallExpr
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fun := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := fun.X.(*ast.Ident); ok && x.Name == "t" && fun.Sel.Name == "Parallel" {
				parallel = true
			}
		case *ast.Ident:
			// A local closure of the same name (the parser resolves it
			// to a variable) is the test's own.
			local := fun.Obj != nil && fun.Obj.Kind == ast.Var
			if sharedNamespaceHelpers[fun.Name] && !local {
				shared = append(shared, call)
			}
		}
		return true
	})
	if !parallel {
		return nil
	}
	return shared
}

// TestE2ETestsRequireCluster: `make test` runs test/e2e with no dev
// cluster, so each of its tests must skip first thing: one that does
// anything before (a push to the dev registry, a kubectl) fails there, or,
// worse, acts on whatever cluster or registry the machine still has.
func TestE2ETestsRequireCluster(t *testing.T) {
	files, err := filepath.Glob("../e2e/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/e2e files found: %v", err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		for _, d := range af.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			n++
			if !startsWithGuard(fn.Body) {
				t.Errorf("%s: %s must call requireE2E(t) or freshNamespace(t) first", fset.Position(fn.Pos()), fn.Name.Name)
			}
			for _, bad := range sharedNamespaceCalls(fn.Body) {
				t.Errorf("%s: %s runs in parallel (t.Parallel) but calls %s, which works in the shared e2e namespace: use its *In form in a namespace of the test's own (ownNamespace)",
					fset.Position(bad.Pos()), fn.Name.Name, bad.Fun.(*ast.Ident).Name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no tests found in test/e2e")
	}
}

func startsWithGuard(body *ast.BlockStmt) bool {
	if len(body.List) == 0 {
		return false
	}
	es, ok := body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && e2eGuards[id.Name]
}
