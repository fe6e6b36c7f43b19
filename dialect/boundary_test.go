package dialect_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// No dialect guesses whether it was given a transaction from the type of what
// it was given: methods take tx *sql.Tx (nil: the pool) and say so. A type
// assertion or type switch on *sql.DB, *sql.Tx or *sql.Conn anywhere in the
// dialects would bring the guessing back.
func TestNoTransactionSniffing(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var typ ast.Expr
			switch n := n.(type) {
			case *ast.TypeAssertExpr:
				typ = n.Type
			case *ast.CaseClause:
				for _, e := range n.List {
					check(t, fset, e)
				}
				return true
			}
			if typ != nil {
				check(t, fset, typ)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, fset *token.FileSet, e ast.Expr) {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return
	}
	if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "sql" && (sel.Sel.Name == "DB" || sel.Sel.Name == "Tx" || sel.Sel.Name == "Conn") {
		t.Errorf("%s: a dialect tells a transaction from a pool by its type (*sql.%s)", fset.Position(e.Pos()), sel.Sel.Name)
	}
}
