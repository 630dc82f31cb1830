// Package termsafe makes JSON text safe to show on a terminal without
// changing its value. agrun's JSON output (`--json`, the HTTP API, SSE
// events) carries text from tools, MCP servers and models; people read it
// with curl and jq in a terminal.
package termsafe

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
)

// JSON rewrites, inside a JSON text, every rune internal/textsafe calls
// unsafe — DEL, C1 controls (U+0080–U+009F; U+009B starts an escape
// sequence on many terminals), format characters (bidi overrides,
// zero-width and tag characters), variation selectors, fillers, line and
// paragraph separators, private-use characters, noncharacters — and
// invalid UTF-8 as \u escapes. encoding/json escapes C0 controls but not
// these. The result is the same JSON value: outside strings a valid JSON
// text has only ASCII (and no DEL). C0 controls other than JSON's
// whitespace, which valid JSON never holds raw, are escaped too. b is
// returned unchanged when nothing needs escaping.
func JSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf && !unsafeASCII(c) {
			if out != nil {
				out = append(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		bad := r == utf8.RuneError && n == 1
		if !bad && !textsafe.IsUnsafe(r) {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

// unsafeASCII reports the ASCII bytes JSON escapes: DEL and the C0
// controls but JSON's whitespace.
func unsafeASCII(c byte) bool {
	return c == 0x7f || c < 0x20 && c != '\n' && c != '\t' && c != '\r'
}
