// Package textsafe is agrun's one definition of unsafe text, and the one set
// of helpers that clean and cut text from untrusted parties (modules, MCP
// servers and clients, HTTP clients, models) before it reaches a model, a
// terminal, a session file, an HTTP answer or an MCP client.
//
//	msg := textsafe.Clean(untrusted, 4<<10)   // drop unsafe runes, cap at 4 KiB
//	tail := textsafe.CleanTail(stderr, 4<<10) // the end of a stream, cleaned
//	shown := textsafe.Escape(untrusted)       // for a terminal: unsafe runes as \x.. / \u....
//
// # What is unsafe
//
// [IsUnsafe] reports, for one rune, the characters a terminal may act on or
// that show nothing yet change or hide what a reader sees:
//
//   - C0 controls (U+0000–U+001F) but newline and tab, which are text;
//     carriage return is unsafe (it rewrites a terminal line);
//   - DEL (U+007F) and the C1 controls (U+0080–U+009F; U+009B is CSI on
//     many terminals);
//   - every default-ignorable code point: format characters (Unicode Cf:
//     zero-width space, joiners, bidi embeddings, overrides and isolates,
//     the BOM, the soft hyphen, tag characters U+E0000–U+E007F),
//     variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF, Mongolian
//     free variation selectors) and the other default ignorables (Hangul
//     fillers U+115F, U+1160, U+3164, U+FFA0, the combining grapheme
//     joiner, unassigned tag-plane code points);
//   - the line and paragraph separators U+2028 and U+2029;
//   - private-use characters (U+E000–U+F8FF and planes 15–16): fonts may
//     draw them as anything;
//   - noncharacters (U+FDD0–U+FDEF and U+xFFFE/U+xFFFF of every plane);
//   - surrogates and values outside Unicode (they cannot come out of valid
//     UTF-8, but a rune can hold them).
//
// Everything else is safe, unassigned code points included (future
// characters). Invalid UTF-8 is not a rune: the cleaning functions replace
// each maximal run of invalid bytes with one U+FFFD, which is safe.
//
// Dropping a variation selector can change how an emoji is drawn (text
// instead of emoji presentation); that is the price of not letting
// selectors carry hidden data.
//
// # Cutting
//
// Every cap is in bytes and every cut falls on a rune boundary. A cut
// string ends in the marker [Ellipsis] ("…", 3 bytes), counted in the cap:
// the result is never longer than max. A cap below the marker's length
// cuts without it. max <= 0 means no cap.
package textsafe

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ellipsis marks where text was cut.
const Ellipsis = "…"

// IsUnsafe reports whether r must not reach a model, a terminal or a
// client as it is (see the package documentation for the classes).
// Newline and tab are safe.
func IsUnsafe(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f
	}
	switch {
	case r < 0xa0: // C1
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	case r >= 0xd800 && r <= 0xdfff, r > utf8.MaxRune:
		return true
	case r >= 0xe000 && r <= 0xf8ff, r >= 0xf0000: // private use (planes 15-16 are all private use or noncharacters)
		return true
	case r >= 0xfdd0 && r <= 0xfdef, r&0xfffe == 0xfffe: // noncharacters
		return true
	}
	return unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// Clean returns s as valid UTF-8 without unsafe runes, at most max bytes
// long (ending in Ellipsis when cut). Each maximal run of invalid bytes
// becomes one U+FFFD; unsafe runes are dropped. It returns s itself when
// nothing changes. Clean is idempotent: Clean(Clean(s, max), max) ==
// Clean(s, max).
func Clean(s string, max int) string {
	i := firstUnsafe(s)
	if i == len(s) && (max <= 0 || len(s) <= max) {
		return s
	}
	if max > 0 && i > max {
		return Truncate(s, max) // the safe prefix alone is over the cap
	}
	var out []byte
	if max > 0 {
		out = make([]byte, 0, min(len(s), max))
	} else {
		out = make([]byte, 0, len(s))
	}
	out = append(out, s[:i]...)
	invalid := false
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r == utf8.RuneError && n == 1 {
			if invalid {
				continue
			}
			invalid = true
			r = utf8.RuneError
		} else {
			invalid = false
			if IsUnsafe(r) {
				continue
			}
		}
		if max > 0 && len(out)+utf8.RuneLen(r) > max {
			return string(cut(out, max))
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// CleanBytes is Clean for bytes.
func CleanBytes(b []byte, max int) string { return Clean(string(b), max) }

// firstUnsafe returns the index of the first invalid byte or unsafe rune
// of s, or len(s).
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || IsUnsafe(r) {
			return i
		}
		i += n
	}
	return len(s)
}

// IsSafe reports whether s is valid UTF-8 without unsafe runes.
func IsSafe(s string) bool { return firstUnsafe(s) == len(s) }

// IndexUnsafe returns the byte index of the first invalid byte or unsafe
// rune of s, or -1 if there is none.
func IndexUnsafe(s string) int {
	if i := firstUnsafe(s); i < len(s) {
		return i
	}
	return -1
}

// cut shortens b so that what is kept of it plus Ellipsis fits in max bytes
// (without the marker when max is shorter than it), at a rune boundary: the
// text went on after b, so b is marked as cut even if it fits.
func cut(b []byte, max int) []byte {
	n := max - len(Ellipsis)
	if n < 0 {
		n = max
	}
	if n > len(b) {
		n = len(b)
	}
	for n > 0 && n < len(b) && !utf8.RuneStart(b[n]) {
		n--
	}
	b = b[:n]
	if max >= len(Ellipsis) {
		b = append(b, Ellipsis...)
	}
	return b
}

// Truncate returns s cut to at most max bytes at a rune boundary, ending
// in Ellipsis when cut; s itself if it fits or max <= 0. It does not
// clean: use Clean for untrusted text.
func Truncate(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	return string(cut([]byte(s[:max+1]), max))
}

// CleanTail returns the end of b, cleaned as by Clean: at most max bytes,
// starting with Ellipsis when the beginning was cut (max <= 0: all of b,
// cleaned). It cleans before cutting, so that invalid bytes (which grow
// into U+FFFD) cannot push the end out, and reads at most the last 4*max
// bytes of b.
func CleanTail(b []byte, max int) string {
	if max <= 0 {
		return CleanBytes(b, 0)
	}
	if len(b) > 4*max {
		b = b[len(b)-4*max:]
	}
	s := CleanBytes(b, 0)
	if len(s) <= max {
		return s
	}
	keep := max - len(Ellipsis)
	if keep < 0 {
		keep = max
	}
	i := len(s) - keep
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	if max >= len(Ellipsis) {
		return Ellipsis + s[i:]
	}
	return s[i:]
}

// Escape makes s safe to show on a terminal while showing what was there:
// invalid bytes become U+FFFD, unsafe runes below U+0080 are written as
// \xHH, other unsafe runes as \uHHHH or \UHHHHHHHH. Newline and tab stay.
// It returns s itself when nothing needs escaping.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i == len(s) {
		return s
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, len(s)+16)
	out = append(out, s[:i]...)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, "\uFFFD"...)
		case !IsUnsafe(r):
			out = utf8.AppendRune(out, r)
		case r < utf8.RuneSelf:
			out = append(out, '\\', 'x', hex[r>>4], hex[r&0xf])
		case r <= 0xffff:
			out = append(out, '\\', 'u')
			for sh := 12; sh >= 0; sh -= 4 {
				out = append(out, hex[r>>sh&0xf])
			}
		default:
			out = append(out, '\\', 'U')
			for sh := 28; sh >= 0; sh -= 4 {
				out = append(out, hex[r>>sh&0xf])
			}
		}
	}
	return string(out)
}

// Error is an error whose message is its cause's, cleaned and capped by
// WrapError; errors.Is and errors.As still see the cause.
type Error struct {
	msg   string
	cause error
}

// Error returns the cleaned message.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.cause }

// WrapError returns err with its message passed through Clean(msg, max),
// computed once: fit for a model, a terminal and a log. It returns nil for
// nil, and err itself when it already is an *Error no longer than max.
func WrapError(err error, max int) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok && (max <= 0 || len(e.msg) <= max) {
		return e
	}
	return &Error{msg: Clean(err.Error(), max), cause: err}
}

// lineBreaks escapes what Escape keeps but a single line must not hold.
var lineBreaks = strings.NewReplacer("\n", `\n`, "\t", `\t`)

// EscapeLine is Escape with newlines and tabs escaped too (\n, \t; a
// carriage return is one of the runes Escape escapes), so that text from a model, a tool or a server cannot
// start a line of its own in a report or a question.
func EscapeLine(s string) string { return lineBreaks.Replace(Escape(s)) }

// FirstLine is the first line of s, leading and trailing space trimmed,
// cut to max bytes as Truncate cuts: what a one-line listing shows of a
// description or a prompt. It does not clean s.
func FirstLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return Truncate(s, max)
}
