package stages

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// stages is the model every other package builds on: plans, their validation,
// what a submission holds. It imports no stageq package, so a dialect or the
// queue can change without touching it.
func TestStagesImportsNoOtherStageqPackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			if path := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(path, "github.com/stageq/stageq/") {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
