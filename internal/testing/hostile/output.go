//go:build unix

package hostile

import (
	"encoding/base64"
	"testing"
)

// Terminal attacks: CSI colour and cursor moves, an OSC title change ended
// by BEL, an OSC 8 hyperlink, a C1 CSI (0x9b, as a raw byte and as U+009B),
// a bidi override, invalid UTF-8 and a NUL.
const TerminalAttack = "\x1b[2J\x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ \x9b31m \u009b31m \u202egnp.exe\u202c \xff\xfe bad \x00 nul"

// Emit is the hostile guest's "emit" op.
func Emit(t testing.TB, stdout, stderr string, exit int) map[string]any {
	return map[string]any{"op": "emit", "stdout_b64": base64.StdEncoding.EncodeToString([]byte(stdout)),
		"stderr_b64": base64.StdEncoding.EncodeToString([]byte(stderr)), "exit": exit}
}
