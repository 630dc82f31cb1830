package loop_test

import (
	"fmt"

	"github.com/agcore/agrun/loop"
)

func ExampleUsage_String() {
	fmt.Println(loop.Usage{PromptTokens: 1200, CompletionTokens: 34, TotalTokens: 1234})
	fmt.Println(loop.Usage{PromptTokens: 900, CachedTokens: 800, CompletionTokens: 100, ReasoningTokens: 60, TotalTokens: 1000, CacheWriteTokens: 50})
	// Output:
	// 1234 tokens (1200 prompt, 34 completion)
	// 1000 tokens (900 prompt, 800 cached, 100 completion, 60 reasoning, 50 written to the cache)
}
