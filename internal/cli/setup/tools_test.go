package setup

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestToolInfos: one row per tool, sorted, the broken ones with why
// (worded by explain and escaped) and their kind, and never a nil
// permission list. (A tool the policy denies: cmd/agrun's TestTools*.)
func TestToolInfos(t *testing.T) {
	e, err := New(context.Background(), testConfig(t), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var explained []string
	infos := e.ToolInfos(func(name string, err error) string {
		explained = append(explained, name)
		return "because\x1b[31m " + err.Error()
	})
	var names []string
	for _, ti := range infos {
		names = append(names, ti.Name)
		if ti.Permissions == nil {
			t.Errorf("%s: nil permissions", ti.Name)
		}
	}
	if strings.Join(names, ",") != "missing,pinned,word_count" {
		t.Fatalf("names %v, want missing,pinned,word_count", names)
	}
	for _, ti := range infos[:2] {
		if ti.Allowed || ti.Kind != "module_refused" || !strings.HasPrefix(ti.Error, `because\x1b[31m `) || !strings.HasPrefix(ti.Source, "wasm:") {
			t.Errorf("broken %s: %+v", ti.Name, ti)
		}
	}
	wc := infos[2]
	if !wc.Allowed || wc.Kind != "" || wc.Denied != "" || wc.Error != "" || !strings.HasPrefix(wc.Source, "wasm:") || !strings.HasPrefix(wc.Description, "Count the words") {
		t.Errorf("word_count: %+v", wc)
	}
	if strings.Join(explained, ",") != "missing,pinned" && strings.Join(explained, ",") != "pinned,missing" {
		t.Errorf("explain was asked about %v, want the two broken tools", explained)
	}
}
