package archtest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestNoPackagePrefixInErrors holds the one rule for error strings
// (docs/ARCHITECTURE.md, "Errors"): no error text or log message begins
// with a Go package's name ("loop: ", "runtime: "). Any error may reach a person —
// the CLI prints it, the HTTP API returns it — and a sentinel is told by
// errors.Is, not by its text. An API field is named in full instead
// ("chat.Config.Model is required"). guest-sdk is exempt (its texts are
// the guest's view of the host: "agrun: ..."), and so are the test kits
// and the dev commands.
func TestNoPackagePrefixInErrors(t *testing.T) {
	names := map[string]bool{}
	for _, n := range goList(t, "-f", "{{.Name}}", "./...") {
		names[n] = true
	}
	// Error texts are made by errors.New, any Errorf (fmt's, or a
	// package's own such as registry.Errorf, whatever argument the format
	// is), and the Sprintf or string an Error method returns; log
	// messages (slog's Debug, Info, Warn, Error, LogAttrs) reach a person
	// too, as the CLI's warnings.
	re := regexp.MustCompile(`(?:(?:errors\.New|Errorf|fmt\.Sprintf|\.Debug|\.Info|\.Warn|\.Error|\.LogAttrs)\([^"\n]*|return )"([a-z0-9_]+): `)
	for _, l := range goList(t, "-f", `{{.Dir}}|{{.ImportPath}}|{{join .GoFiles " "}}`, "./...") {
		parts := strings.SplitN(l, "|", 3)
		rel := strings.TrimPrefix(parts[1], module+"/")
		if strings.HasPrefix(rel, "internal/testing/") || strings.HasPrefix(rel, "internal/cmd/") || strings.HasPrefix(rel, "guest-sdk") {
			continue
		}
		for _, f := range strings.Fields(parts[2]) {
			b, err := os.ReadFile(parts[0] + "/" + f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				if names[string(m[1])] {
					t.Errorf("%s/%s: an error text begins with the package name %q: say what happened instead", rel, f, m[1])
				}
			}
		}
	}
}
