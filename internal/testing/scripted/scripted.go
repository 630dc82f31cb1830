// Package scripted is what the scripted fake servers of the test kit
// (chattest, responsestest, anthropictest, geminitest) share: the pacing
// of a reply — a channel closed when the request arrives, a hold and a
// delay before the answer, a channel closed when the client goes away
// meanwhile.
//
//	p := scripted.Pace{Started: rep.Started, Hold: rep.Hold, Delay: rep.Delay, Gone: rep.Gone}
//	p.Start()
//	if !p.Wait(r.Context()) {
//		return // the client went away; Gone is closed
//	}
package scripted

import (
	"context"
	"time"
)

// Pace is when a scripted reply is answered. Nil channels and a zero
// Delay are not waited for.
type Pace struct {
	Started chan<- struct{} // closed when the request arrives (Start)
	Hold    <-chan struct{} // the answer waits until it is closed
	Delay   time.Duration   // then waits this long
	Gone    chan<- struct{} // closed when the client goes away while the answer waits or stalls
}

// Start closes Started.
func (p Pace) Start() {
	if p.Started != nil {
		close(p.Started)
	}
}

// Wait waits for Hold, then Delay; false (and Gone closed) when ctx, the
// client's request, ends first.
func (p Pace) Wait(ctx context.Context) bool {
	if p.Hold != nil {
		select {
		case <-p.Hold:
		case <-ctx.Done():
			p.Left()
			return false
		}
	}
	if p.Delay > 0 {
		t := time.NewTimer(p.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			p.Left()
			return false
		}
	}
	return true
}

// Left closes Gone: the client went away (during a stall, say).
func (p Pace) Left() {
	if p.Gone != nil {
		close(p.Gone)
	}
}
