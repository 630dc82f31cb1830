package wire

import "testing"

func TestParseErrorBody(t *testing.T) {
	for _, c := range []struct{ body, typ, code, msg string }{
		{`{"error":{"message":"bad","type":"invalid_request_error","code":"invalid_value"}}`, "invalid_request_error", "invalid_value", "bad"},
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "overloaded_error", "", "Overloaded"},
		{`{"error":{"code":400,"message":"The input token count (5) exceeds","status":"INVALID_ARGUMENT"}}`, "INVALID_ARGUMENT", "", "The input token count (5) exceeds"},
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
