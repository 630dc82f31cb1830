package loop

import (
	"reflect"
	"testing"
	"time"
)

// TestLimitsWithDefaults: the zero Limits is every default, a negative
// value means none or no bound where the field says so, and small
// values are raised; fields without a default are kept as given.
func TestLimitsWithDefaults(t *testing.T) {
	want := Limits{
		MaxTurns:            DefaultMaxTurns,
		MaxToolCallsPerTurn: DefaultMaxToolCallsPerTurn,
		MaxToolMessageBytes: DefaultMaxToolMessageBytes,
		MaxRetries:          DefaultMaxRetries,
		MaxRetryWait:        DefaultMaxRetryWait,
		StreamIdleTimeout:   DefaultStreamIdleTimeout,
	}
	if got := (Limits{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("zero Limits: got %+v, want %+v", got, want)
	}
	neg := Limits{MaxTurns: -1, MaxToolCallsPerTurn: -1, MaxToolMessageBytes: -1, MaxRetries: -1,
		MaxRetryWait: -1, StreamIdleTimeout: -1, ContextWindow: 7, RequestTimeout: time.Second,
		MaxTotalTokens: 5, MaxToolCalls: 3}
	want = Limits{MaxTurns: DefaultMaxTurns, MaxToolCallsPerTurn: DefaultMaxToolCallsPerTurn,
		ContextWindow: 7, RequestTimeout: time.Second, MaxTotalTokens: 5, MaxToolCalls: 3}
	if got := neg.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Errorf("negative Limits: got %+v, want %+v", got, want)
	}
	if got := (Limits{MaxToolMessageBytes: 10}).withDefaults().MaxToolMessageBytes; got != 1024 {
		t.Errorf("MaxToolMessageBytes 10: got %d, want 1024", got)
	}
}
