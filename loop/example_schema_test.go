package loop_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/loop/chat"
)

// A final answer that must match a JSON Schema: the schema goes out as
// response_format (strict: it is in OpenAI's strict subset), the answer is
// validated by the registry's validator, and Response.Text is its JSON.
func ExampleConfig_responseSchema() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println("strict response_format:", strings.Contains(string(body), `"response_format":{"json_schema":{"name":"final_answer","strict":true`))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"{\"name\":\"Ada Lovelace\",\"born\":1815}"},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()

	p, err := chat.New(chat.Config{BaseURL: srv.URL, Model: "any-model"})
	if err != nil {
		panic(err)
	}
	c, err := loop.New(loop.Config{Provider: p, ResponseSchema: []byte(`{
		"type": "object",
		"properties": {"name": {"type": "string"}, "born": {"type": "integer"}},
		"required": ["name", "born"],
		"additionalProperties": false}`)})
	if err != nil {
		panic(err)
	}
	resp, err := c.SubmitWithTools(context.Background(), "Who wrote the first program?", nil)
	if err != nil {
		fmt.Println("run failed:", loop.KindOf(err), err) // invalid_output after a retry
		return
	}
	fmt.Println(resp.Text)
	// Output:
	// strict response_format: true
	// {"name":"Ada Lovelace","born":1815}
}
