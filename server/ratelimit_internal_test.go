package server

import (
	"fmt"
	"testing"
	"time"
)

func TestRateLimiterRefills(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newRateLimiter(3)
	l.now = func() time.Time { return now }
	for i := 0; i < 3; i++ {
		if ok, _ := l.take("a"); !ok {
			t.Fatalf("take %d refused within the burst", i)
		}
	}
	ok, wait := l.take("a")
	if ok || wait <= 0 || wait > 20*time.Second {
		t.Fatalf("4th take: ok=%v wait=%v, want refused with a wait of at most 20s", ok, wait)
	}
	if ok, _ := l.take("b"); !ok {
		t.Error("another key shares the bucket")
	}
	now = now.Add(20 * time.Second) // one token back (3 per minute)
	if ok, _ := l.take("a"); !ok {
		t.Error("no token after 20 s")
	}
	if ok, _ := l.take("a"); ok {
		t.Error("two tokens after 20 s")
	}
	now = now.Add(time.Hour) // refills to the burst, not beyond
	for i := 0; i < 3; i++ {
		if ok, _ := l.take("a"); !ok {
			t.Fatalf("take %d after an hour refused", i)
		}
	}
	if ok, _ := l.take("a"); ok {
		t.Error("the bucket grew past its burst")
	}
}

// TestRateLimiterStaysBounded: a stream of new clients (identities,
// addresses) does not grow the buckets past maxBuckets plus those used in
// the last minute, and a pruned client starts full, as it would have.
func TestRateLimiterStaysBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newRateLimiter(1)
	l.now = func() time.Time { return now }
	for i := range 3 * maxBuckets {
		if ok, _ := l.take(fmt.Sprint("client-", i)); !ok {
			t.Fatalf("client %d refused on its first upload", i)
		}
		now = now.Add(time.Second / 10)
	}
	if n := len(l.buckets); n > maxBuckets {
		t.Fatalf("%d buckets kept, want at most %d", n, maxBuckets)
	}
	if ok, _ := l.take("client-0"); !ok {
		t.Fatal("a pruned client was refused")
	}
	last := fmt.Sprint("client-", 3*maxBuckets-1)
	if ok, _ := l.take(last); ok {
		t.Fatal("a client used a moment ago got a second upload within its minute")
	}
}
