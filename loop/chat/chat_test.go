package chat_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	c, _ := loop.New(loop.Config{Provider: p, Limits: loop.Limits{MaxRetries: -1}})
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

// max_output_tokens is max_completion_tokens for OpenAI's own endpoint
// (its reasoning models refuse max_tokens) and max_tokens for every other
// server (most know only that one).
func TestMaxOutputTokensField(t *testing.T) {
	srv := chattest.New(t, chattest.Reply{Text: "a"})
	p, _ := chat.New(chat.Config{BaseURL: srv.URL, Model: "m", MaxOutputTokens: 77})
	c, _ := loop.New(loop.Config{Provider: p})
	if _, err := c.Submit(context.Background(), "hi"); err != nil {
		t.Fatal(err)
	}
	if raw := string(srv.Requests()[0].Raw); !strings.Contains(raw, `"max_tokens":77`) || strings.Contains(raw, "max_completion_tokens") {
		t.Errorf("a local server got %s", raw)
	}
	// OpenAI's host: the request is not sent here; its params are checked.
	var got string
	rt := roundTripper(func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		return nil, errors.New("not sent")
	})
	p, _ = chat.New(chat.Config{BaseURL: "https://api.openai.com/v1", Model: "gpt-5", MaxOutputTokens: 77, HTTPClient: &http.Client{Transport: rt}})
	c, _ = loop.New(loop.Config{Provider: p, Limits: loop.Limits{MaxRetries: -1}})
	c.Submit(context.Background(), "hi")
	if !strings.Contains(got, `"max_completion_tokens":77`) || strings.Contains(got, `"max_tokens"`) {
		t.Errorf("api.openai.com got %s", got)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A connection that breaks after the provider answered (HTTP/1.1, closed
// in the middle of the stream) is not "cannot reach provider": the
// provider was reached and its reply broke.
func TestBrokenConnectionAfterAnswerIsNotUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", chattest.TextChunk("half a sen"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // HTTP/1.1: the connection is closed
	}))
	defer srv.Close()
	p, err := chat.New(chat.Config{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := loop.New(loop.Config{Provider: p, Limits: loop.Limits{MaxRetries: -1}})
	for _, err := range c.SubmitStreamWithTools(context.Background(), "hi", nil) {
		if err == nil {
			continue
		}
		if strings.Contains(err.Error(), "cannot reach provider") {
			t.Fatalf("a stream broken after the answer: %v", err)
		}
		return
	}
	t.Fatal("no error for a broken stream")
}
