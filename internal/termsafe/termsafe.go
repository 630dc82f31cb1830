// Package termsafe makes JSON text safe to show on a terminal without
// changing its value. agrun's JSON output (`--json`, the HTTP API, SSE
// events) carries text from tools, MCP servers and models; people read it
// with curl and jq in a terminal.
package termsafe

import (
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON rewrites, inside a JSON text, the characters a terminal could act
// on or that hide text — C1 controls (U+0080–U+009F; U+009B starts an
// escape sequence on many terminals), format characters (bidi overrides,
// zero-width and tag characters), line and paragraph separators — and
// invalid UTF-8 as \u escapes. encoding/json escapes C0 controls but not
// these. The result is the same JSON value: outside strings a valid JSON
// text has only ASCII. b is returned unchanged when nothing needs escaping.
func JSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if out != nil {
				out = append(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		bad := r == utf8.RuneError && n == 1
		if !bad && !Hidden(r) {
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

// Hidden reports whether a non-ASCII rune is one a terminal may act on or
// that hides or reorders text: a C1 control, a format character (Cf), or
// U+2028/U+2029.
func Hidden(r rune) bool {
	return r >= 0x80 && r < 0xa0 || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
}
