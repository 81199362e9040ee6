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
