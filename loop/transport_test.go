package loop

import (
	"errors"
	"io"
	"testing"
)

// A TransportError says "cannot reach provider" only when the provider
// never answered; a connection that broke after a status says that.
func TestTransportErrorSaysWhetherAnswered(t *testing.T) {
	if got := (&TransportError{Err: errors.New("connection refused")}).Error(); got != "cannot reach provider: connection refused" {
		t.Errorf("not reached: %q", got)
	}
	if got := (&TransportError{Err: io.ErrUnexpectedEOF, Status: 200}).Error(); got != "the connection to the provider broke during its reply (it had answered 200): unexpected EOF" {
		t.Errorf("broke after answering: %q", got)
	}
	if KindOf(&TransportError{Status: 200, Err: io.EOF}) != KindTransport {
		t.Error("a broken connection is kind transport")
	}
}
