package loop_test

import (
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
)

func init() {
	loop.NewTestProvider = func(c loop.TestProviderConfig) (loop.Provider, error) {
		return chat.New(chat.Config{BaseURL: c.BaseURL, APIKey: c.APIKey, Model: c.Model, Temperature: c.Temperature,
			ParallelToolCalls: c.ParallelToolCalls, Reasoning: c.Reasoning, HTTPClient: c.HTTPClient})
	}
}
