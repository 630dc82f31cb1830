package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseErrorBody(t *testing.T) {
	for _, c := range []struct{ body, typ, code, msg string }{
		{`{"error":{"message":"bad","type":"invalid_request_error","code":"invalid_value"}}`, "invalid_request_error", "invalid_value", "bad"},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded_error", "", "Overloaded"},
		{`{"error":{"code":400,"message":"The input token count (5) exceeds","status":"INVALID_ARGUMENT"}}`, "INVALID_ARGUMENT", "400", "The input token count (5) exceeds"},
		{`{"error":"model not found"}`, "", "", "model not found"},
		{`{"message":"oops","type":"t"}`, "t", "", "oops"},
		{`{"detail":"nope"}`, "", "", "nope"},
		{"<html>bad \x1b[31mgateway</html>", "", "", "<html>bad [31mgateway</html>"},
	} {
		typ, code, msg := ParseErrorBody([]byte(c.body))
		if typ != c.typ || code != c.code || msg != c.msg {
			t.Errorf("%s: %q %q %q", c.body, typ, code, msg)
		}
	}
}

func readAll(sse bool, body string) error {
	b := &guardedBody{rc: io.NopCloser(strings.NewReader(body)), left: 1 << 30, sse: sse}
	_, err := io.Copy(io.Discard, b)
	return err
}

// The guard counts JSON values outside strings, per stream event or per
// body, and the bytes of each event; strings, escapes and event ends are
// followed.
func TestGuardedBody(t *testing.T) {
	many := "[" + strings.Repeat("0,", MaxEventValues+10) + "0]"
	if err := readAll(true, "data: "+many+"\n\n"); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("an event of %d values: %v", MaxEventValues+10, err)
	}
	// The same number of values spread over events is fine, and commas in
	// strings (escaped quotes included) are not values.
	var sb bytes.Buffer
	for range 20 {
		sb.WriteString(`data: {"a":"` + strings.Repeat(`,\",[{`, 20000) + `","b":[1,2,3]}` + "\n\n")
	}
	if err := readAll(true, sb.String()); err != nil {
		t.Errorf("events under the bounds: %v", err)
	}
	if err := readAll(false, many); err != nil {
		t.Errorf("a body of %d values (under MaxBodyValues): %v", MaxEventValues+10, err)
	}
	if err := readAll(false, "["+strings.Repeat("0,", MaxBodyValues)+"0]"); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("a body over MaxBodyValues: %v", err)
	}
	if err := readAll(true, "data: \""+strings.Repeat("x", MaxEventBytes)+"\"\n\n"); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("an event over MaxEventBytes: %v", err)
	}
	b := &guardedBody{rc: io.NopCloser(strings.NewReader(strings.Repeat("x", 100))), left: 10}
	if _, err := io.Copy(io.Discard, b); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("a body over its limit: %v", err)
	}
}

func TestCauseIsCutAndCleaned(t *testing.T) {
	inner := errors.New("chunk: \x1b[31m" + strings.Repeat("x", 10000))
	c := Cause(inner)
	if len(c.Error()) > maxCause+8 || strings.ContainsRune(c.Error(), 0x1b) || !errors.Is(c, inner) {
		t.Errorf("%d bytes, %q", len(c.Error()), c.Error()[:40])
	}
}
