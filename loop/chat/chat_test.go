package chat_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agcore/agrun/internal/testing/chattest"
	"github.com/agcore/agrun/internal/testing/providertest"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
)

func TestSuite(t *testing.T) { providertest.Run(t, providertest.Chat) }

// A server that answers a request for a whole reply with a stream
// answered: the run fails as the provider's (kind provider, saying so),
// not as a transport failure ("cannot reach provider").
func TestWholeReplyAskedStreamAnswered(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{Events: "data: " + chattest.TextChunk("hi") + "\n\ndata: " + chattest.FinishChunk("stop") + "\n\ndata: [DONE]\n\n"})
	p, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := loop.New(loop.Config{Provider: p, MaxRetries: -1})
	_, err = c.SubmitWithTools(context.Background(), "hi", nil)
	if loop.KindOf(err) != loop.KindProvider || !errors.Is(err, loop.ErrBadResponse) || !strings.Contains(err.Error(), "streamed a reply that was asked for whole") {
		t.Fatalf("err = %v (kind %q)", err, loop.KindOf(err))
	}
}

// A stream reset mid-reply (HTTP/2 RST_STREAM, as a load balancer sends)
// is an incomplete stream: retried, its part never kept.
func TestStreamResetIsRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1) == 1 {
			fmt.Fprintf(w, "data: %s\n\n", chattest.TextChunk("half a sen"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // HTTP/2: RST_STREAM
		}
		fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chattest.TextChunk("whole"), chattest.FinishChunk("stop"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	p, err := chat.New(chat.Config{BaseURL: srv.URL + "/v1", Model: "m", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := loop.New(loop.Config{Provider: p})
	var retries []*loop.Retry
	for ev, err := range c.SubmitStreamWithTools(context.Background(), "hi", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := ev.(*loop.Retry); ok {
			retries = append(retries, r)
		}
	}
	if len(retries) != 1 || !strings.Contains(retries[0].Reason, "broke off") {
		t.Errorf("retries %+v", retries)
	}
	if m := c.Messages(); len(m) != 2 || m[1].Content != "whole" {
		t.Errorf("history %+v", m)
	}
}
