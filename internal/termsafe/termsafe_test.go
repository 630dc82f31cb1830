package termsafe

import (
	"encoding/json"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
)

func TestJSON(t *testing.T) {
	for _, s := range []string{"plain", "x\u009b31m", "\u202eevil", "zero\u200bwidth", "tag\U000E0049", "line\u2028sep", "é ü 中文 🙂",
		"private\ue000use", "plane15\U000F0041", "vs\ufe0f", "filler\u3164", "nonchar\ufdd0", "del\x7f"} {
		in, _ := json.Marshal(map[string]string{"a": s})
		out := JSON(in)
		var m map[string]string
		if err := json.Unmarshal(out, &m); err != nil || m["a"] != s {
			t.Errorf("%q: %s does not decode to the same value (%v)", s, out, err)
		}
		for _, r := range string(out) {
			if textsafe.IsUnsafe(r) && r != '\n' {
				t.Errorf("%q: %s still carries %U", s, out, r)
			}
		}
	}
	if got := JSON([]byte("\"a\xffb\"")); string(got) != `"a\ufffdb"` {
		t.Errorf("invalid UTF-8: %s", got)
	}
	in := []byte(`{"a":"unchanged"}`)
	if out := JSON(in); &out[0] != &in[0] {
		t.Error("clean input should be returned as is")
	}
}
