// Package testprovider makes the loop providers of tests outside package
// loop: a Chat Completions provider for a chattest server, in one line.
//
//	lc := loop.Config{Provider: testprovider.Chat(t, srv.URL)}
package testprovider

import (
	"testing"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
)

// Chat is a chat.Provider for baseURL with model "m" and key "k"; it
// fails the test if the provider cannot be made.
func Chat(t testing.TB, baseURL string) loop.Provider {
	t.Helper()
	p, err := chat.New(chat.Config{BaseURL: baseURL, Model: "m", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
