package setup

import (
	"fmt"
	"os"

	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/anthropic"
	"github.com/agcore/agrun/loop/chat"
	"github.com/agcore/agrun/loop/gemini"
	"github.com/agcore/agrun/loop/responses"
)

// Provider is the model API of [llm]: its api, with the key from the
// variable api_key_env names (never from the config file itself).
func Provider(l *config.LLM) (loop.Provider, error) {
	key := os.Getenv(l.APIKeyEnv)
	switch l.API {
	case "", "chat":
		return chat.New(chat.Config{BaseURL: l.BaseURL, APIKey: key, Model: l.Model, Temperature: l.Temperature,
			ParallelToolCalls: l.ParallelToolCalls, Reasoning: l.Reasoning, MaxOutputTokens: l.MaxOutputTokens})
	case "responses":
		return responses.New(responses.Config{BaseURL: l.BaseURL, APIKey: key, Model: l.Model, Temperature: l.Temperature,
			ParallelToolCalls: l.ParallelToolCalls, Reasoning: l.Reasoning, Store: l.Store, MaxOutputTokens: l.MaxOutputTokens})
	case "anthropic":
		cache := l.PromptCache == nil || *l.PromptCache
		return anthropic.New(anthropic.Config{BaseURL: l.BaseURL, APIKey: key, Model: l.Model, Temperature: l.Temperature,
			Reasoning: l.Reasoning, MaxOutputTokens: l.MaxOutputTokens, NoPromptCache: !cache})
	case "gemini":
		return gemini.New(gemini.Config{BaseURL: l.BaseURL, APIKey: key, Model: l.Model, Temperature: l.Temperature,
			Reasoning: l.Reasoning, MaxOutputTokens: l.MaxOutputTokens})
	}
	return nil, fmt.Errorf("api %q is not chat, responses, anthropic or gemini", l.API)
}
