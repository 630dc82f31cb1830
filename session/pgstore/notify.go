package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MaxNotifyPayload is the largest payload Notify sends: PostgreSQL's
// NOTIFY limit is 8000 bytes (in its default build).
const MaxNotifyPayload = 7900

// channel is the LISTEN/NOTIFY channel of session id: an identifier of
// at most 63 bytes whatever the id (ids are up to 64 characters).
func channel(id string) string {
	h := sha256.Sum256([]byte(id))
	return "agrun_live_" + hex.EncodeToString(h[:16])
}

// Notify sends payload to the listeners of session id (Listen) with
// pg_notify: nothing is stored, a listener that is not listening at that
// moment never sees it, and a payload over MaxNotifyPayload is refused.
// It is what the cluster's workers stream a model reply's text through
// (cluster.LiveBus). It is safe for concurrent use.
func (s *Sessions) Notify(ctx context.Context, id string, payload []byte) error {
	if len(payload) > MaxNotifyPayload {
		return fmt.Errorf("session store: a notification of %d bytes is over %d", len(payload), MaxNotifyPayload)
	}
	if _, err := s.pool.Exec(ctx, "select pg_notify($1, $2)", channel(id), string(payload)); err != nil {
		return fmt.Errorf("session store: notify: %w", err)
	}
	return nil
}

// Listen returns the payloads Notify sends for session id from now
// until ctx ends, when the channel is closed. It holds a connection of
// its own (taken out of the pool) for that time. Payloads the caller does
// not take in time are dropped (the channel holds 256), as are those sent
// while the connection is lost: what Listen yields is a best-effort view,
// never the record.
func (s *Sessions) Listen(ctx context.Context, id string) (<-chan []byte, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("session store: listen: %w", err)
	}
	conn := pc.Hijack() // closed when done: LISTEN state never goes back to the pool
	if _, err := conn.Exec(ctx, "listen "+quoteIdent(channel(id))); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("session store: listen: %w", err)
	}
	out := make(chan []byte, 256)
	go func() {
		defer close(out)
		defer conn.Close(context.WithoutCancel(ctx))
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return // ctx ended, or the connection is lost: the stream ends, the record stays
			}
			select {
			case out <- []byte(n.Payload):
			default: // the reader is behind: dropped
			}
		}
	}()
	return out, nil
}

// quoteIdent quotes a channel name (letters, digits and _ only).
func quoteIdent(s string) string { return `"` + s + `"` }
