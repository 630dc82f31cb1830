package chat_test

import (
	"context"
	"errors"
	"strings"
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
