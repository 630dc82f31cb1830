package textsafe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestIsUnsafe(t *testing.T) {
	unsafe := map[string][]rune{
		"C0 controls":          {0x00, 0x07, 0x08, 0x0b, 0x0c, 0x0d, 0x1b, 0x1f},
		"DEL and C1":           {0x7f, 0x80, 0x85, 0x9b, 0x9d, 0x9f},
		"bidi controls":        {0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069},
		"zero-width":           {0x200b, 0x200c, 0x200d, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x180e},
		"BOM and soft hyphen":  {0xfeff, 0x00ad},
		"tags":                 {0xe0000, 0xe0001, 0xe0020, 0xe0041, 0xe007f, 0xe0fff},
		"variation selectors":  {0xfe00, 0xfe0f, 0xe0100, 0xe01ef, 0x180b, 0x180c, 0x180d},
		"hangul fillers":       {0x115f, 0x1160, 0x3164, 0xffa0},
		"other ignorables":     {0x034f, 0x17b4, 0x17b5, 0xfff0, 0x1bca0, 0x1d173},
		"separators":           {0x2028, 0x2029},
		"private use":          {0xe000, 0xf8ff, 0xf0000, 0xffffd, 0x100000, 0x10fffd},
		"noncharacters":        {0xfdd0, 0xfdef, 0xfffe, 0xffff, 0x1fffe, 0x10ffff},
		"surrogates and range": {0xd800, 0xdfff, 0x110000, -1},
	}
	for class, rs := range unsafe {
		for _, r := range rs {
			if !IsUnsafe(r) {
				t.Errorf("%s: IsUnsafe(%U) = false", class, r)
			}
		}
	}
	safe := []rune{'\n', '\t', ' ', 'a', '~', 0xa0, 0xe9, 0x3000, 0x4e2d, 0x1f600, 0xfffd, 0x2800, 0x0301, 0x0378 /* unassigned */, 0xfffc}
	for _, r := range safe {
		if IsUnsafe(r) {
			t.Errorf("IsUnsafe(%U) = true", r)
		}
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"empty", "", 10, ""},
		{"plain", "hello", 0, "hello"},
		{"newline and tab kept", "a\n\tb", 0, "a\n\tb"},
		{"CR dropped", "a\rb", 0, "ab"},
		{"ESC sequence", "x\x1b[31mred\x1b[0m", 0, "x[31mred[0m"},
		{"OSC with BEL", "\x1b]0;title\x07ok", 0, "]0;titleok"},
		{"C1 CSI", "a\u009b31mb", 0, "a31mb"},
		{"bidi override", "abc\u202edcba", 0, "abcdcba"},
		{"zero-width", "ig\u200bnore", 0, "ignore"},
		{"tags", "hi\U000E0041\U000E0042", 0, "hi"},
		{"variation selector", "\u2764\ufe0f", 0, "\u2764"},
		{"hangul filler", "a\u3164b", 0, "ab"},
		{"private use", "a\ue000b\U000F0000", 0, "ab"},
		{"noncharacter", "a\ufffeb", 0, "ab"},
		{"BOM", "\ufeffstart", 0, "start"},
		{"invalid byte", "a\xffb", 0, "a\ufffdb"},
		{"invalid run is one replacement", "a\xff\xfe\xfdb", 0, "a\ufffdb"},
		{"cut surrogate encoding", "a\xed\xa0\x80b", 0, "a\ufffdb"},
		{"cap fits", "hello", 5, "hello"},
		{"cap cuts with marker", "hello world", 8, "hello…"},
		{"cap on rune boundary", "ééééé", 7, "éé…"},
		{"cap below marker", "hello", 2, "he"},
		{"cap below marker on rune boundary", "éé", 2, "é"},
		{"cap 3", "hello", 3, "…"},
		{"dropped runes do not count", "\x1b\x1b\x1babc", 3, "abc"},
		{"cut after cleaning", "\x1b" + strings.Repeat("a", 10), 6, "aaa…"},
		{"replacement counts 3 bytes", "\xff\xff", 3, "\ufffd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clean(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("Clean(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if got2 := CleanBytes([]byte(tt.in), tt.max); got2 != got {
				t.Errorf("CleanBytes = %q, Clean = %q", got2, got)
			}
			checkCleaned(t, tt.in, tt.max, got)
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"hello", 0, "hello"},
		{"hello", 5, "hello"},
		{"hello", 4, "h…"},
		{"héllo", 5, "h…"},
		{"日本語", 6, "日…"},
		{"日本語", 5, "…"},
		{"日本語", 7, "日…"},
		{"日本語", 2, ""},
		{"\x1bkept", 10, "\x1bkept"}, // Truncate does not clean
	}
	for _, tt := range tests {
		if got := Truncate(tt.in, tt.max); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

func TestCleanTail(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789", 6, "…789"},
		{"aé" + "ééé", 8, "…éé"},
		{"\x1b[31m" + "end", 10, "[31mend"},
		{strings.Repeat("\xff", 100) + "end", 9, "\ufffdend"}, // one replacement for the run
		{strings.Repeat("ab", 100) + "end", 9, "…babend"},
		{"abc", 0, "abc"},
	}
	for _, tt := range tests {
		got := CleanTail([]byte(tt.in), tt.max)
		if got != tt.want {
			t.Errorf("CleanTail(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
		if tt.max > 0 && len(got) > tt.max {
			t.Errorf("CleanTail(%q, %d) is %d bytes", tt.in, tt.max, len(got))
		}
	}
}

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain\n\ttext", "plain\n\ttext"},
		{"\x1b[31m", `\x1b[31m`},
		{"\x7f", `\x7f`},
		{"a\u009bb", `a\u009bb`},
		{"\u202e", `\u202e`},
		{"\ue000", `\ue000`},
		{"\U000F0001", `\U000f0001`},
		{"\U000E0041", `\U000e0041`},
		{"\xff", "\ufffd"},
	}
	for _, tt := range tests {
		got := Escape(tt.in)
		if got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !IsSafe(got) {
			t.Errorf("Escape(%q) = %q is not safe", tt.in, got)
		}
	}
}

func TestIndexUnsafe(t *testing.T) {
	if i := IndexUnsafe("ab\u200bc"); i != 2 {
		t.Errorf("IndexUnsafe = %d", i)
	}
	if i := IndexUnsafe("abc\n"); i != -1 {
		t.Errorf("IndexUnsafe = %d", i)
	}
	if IsSafe("a\xff") {
		t.Error("IsSafe accepted invalid UTF-8")
	}
}

func TestCleanJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":"x"}`, `{"b":1,"a":"x"}`}, // unchanged, byte for byte
		{`{"k":"caf\u00e9"}`, `{"k":"caf\u00e9"}`},
		{`{"k":"\u001b[31m"}`, `{"k":"[31m"}`},
		{"{\"k\":\"a\u202eb\"}", `{"k":"ab"}`},
		{`{"z":1,"k\u200b":"v","n":12345678901234567890}`, `{"k":"v","n":12345678901234567890,"z":1}`},
		{`["\u009b", 1.50, true, null, "<&>"]`, `["",1.50,true,null,"<&>"]`},
		{`{"a\u200b":2,"a":1}`, `{"a":1}`},
		{"\"\xff\"", `"` + "\ufffd" + `"`},
		{`"\\u001b"`, `"\\u001b"`}, // an escaped backslash, not an escape
	}
	for _, tt := range tests {
		got, err := CleanJSON([]byte(tt.in))
		if err != nil {
			t.Errorf("CleanJSON(%s): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("CleanJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if _, err := CleanJSON([]byte(`{`)); err == nil {
		t.Error("CleanJSON accepted invalid JSON")
	}
}

// checkCleaned asserts what Clean promises about got = Clean(in, max).
func checkCleaned(t *testing.T, in string, max int, got string) {
	t.Helper()
	if !utf8.ValidString(got) {
		t.Fatalf("Clean(%q, %d) = %q: invalid UTF-8", in, max, got)
	}
	if i := IndexUnsafe(got); i >= 0 {
		t.Fatalf("Clean(%q, %d) = %q: unsafe rune at %d", in, max, got, i)
	}
	if max > 0 && len(got) > max {
		t.Fatalf("Clean(%q, %d) = %q: %d bytes", in, max, got, len(got))
	}
	if again := Clean(got, max); again != got {
		t.Fatalf("Clean is not idempotent: %q then %q", got, again)
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "abc", "\x7f", "\r\b\f", "\x1b[31m\u009b\u202e\ufeff\U000E0041\ue000", "\xff\xfe日本", "é\u200b\n\t\r"} {
		f.Add(s, 0)
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 64
		got := Clean(s, max)
		checkCleaned(t, s, max, got)
		if max <= 0 || len(got) < max-len(Ellipsis) {
			// Not cut: every safe rune of s is kept, in order.
			if want := Clean(s, 0); max > 0 && len(want) <= max && got != want {
				t.Fatalf("Clean(%q, %d) = %q, uncapped %q", s, max, got, want)
			}
		}
		tail := CleanTail([]byte(s), max)
		if !IsSafe(tail) || max > 0 && len(tail) > max {
			t.Fatalf("CleanTail(%q, %d) = %q", s, max, tail)
		}
		if tr := Truncate(s, max); max > 0 && len(tr) > max || !strings.HasPrefix(s, strings.TrimSuffix(tr, Ellipsis)) {
			t.Fatalf("Truncate(%q, %d) = %q", s, max, tr)
		}
		if e := Escape(s); !IsSafe(e) {
			t.Fatalf("Escape(%q) = %q", s, e)
		}
		if b, _ := json.Marshal(s); true {
			out, err := CleanJSON(b)
			if err != nil {
				t.Fatalf("CleanJSON(%s): %v", b, err)
			}
			var back string
			if err := json.Unmarshal(out, &back); err != nil || !IsSafe(back) {
				t.Fatalf("CleanJSON(%s) = %s (%v)", b, out, err)
			}
		}
	})
}

func TestWrapError(t *testing.T) {
	if WrapError(nil, 10) != nil {
		t.Fatal("WrapError(nil) is not nil")
	}
	cause := errors.New("trap\x1b]0;x\x07 at \u009b$f" + strings.Repeat("g", 100))
	err := WrapError(cause, 20)
	if !errors.Is(err, cause) {
		t.Error("the cause is lost")
	}
	if got := err.Error(); got != "trap]0;x at $fggg…" || len(got) > 20 {
		t.Errorf("message %q", got)
	}
	if again := WrapError(err, 20); again != err {
		t.Error("wrapping twice")
	}
}

func TestEscapeLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                 "plain",
		"two\nlines\r\tand tab": `two\nlines\x0d\tand tab`,
		"\x1b[31m\n":            `\x1b[31m\n`,
	} {
		got := EscapeLine(in)
		if got != want {
			t.Errorf("EscapeLine(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(got, "\n\r\t") || !IsSafe(got) {
			t.Errorf("EscapeLine(%q) = %q is not one safe line", in, got)
		}
	}
}

func TestFirstLine(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"  one\ntwo", 10, "one"},
		{"\n\nfirst after blanks\nsecond", 100, "first after blanks"},
		{"a long first line", 6, Truncate("a long first line", 6)},
		{"", 5, ""},
	} {
		if got := FirstLine(tt.in, tt.max); got != tt.want {
			t.Errorf("FirstLine(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}
