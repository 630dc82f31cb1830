package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kindDecl is a constant of a kind type given a string: `KindX Kind =
// "x"`, `X registry.Kind = "x"`.
var kindDecl = regexp.MustCompile(`(?m)^\s*(\w+)\s+(?:\w+\.)?Kind\s*=\s*"([^"]+)"`)

// TestKindsDeclaredOnce: one vocabulary of error kinds (the registry's
// Kind, which loop.Kind and the server's Kind are), each string declared
// once in the module; a package that needs a kind another declares uses
// that constant.
func TestKindsDeclaredOnce(t *testing.T) {
	seen := map[string]string{}
	err := filepath.WalkDir("../../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache" || d.Name() == "testdata" || d.Name() == "node_modules" || d.Name() == "third_party") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range kindDecl.FindAllStringSubmatch(string(b), -1) {
			where := strings.TrimPrefix(p, "../../../") + " " + m[1]
			if prev, ok := seen[m[2]]; ok {
				t.Errorf("kind %q declared twice: %s and %s", m[2], prev, where)
			}
			seen[m[2]] = where
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 40 {
		t.Errorf("found %d kind declarations: the pattern no longer matches how kinds are declared", len(seen))
	}
}

// TestOneKindType: loop.Kind and the server's Kind are the registry's.
func TestOneKindType(t *testing.T) {
	for _, f := range []string{"../../../loop/errors.go", "../../../server/http.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "type Kind = registry.Kind") {
			t.Errorf("%s declares a Kind type of its own", f)
		}
	}
}
