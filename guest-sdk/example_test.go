package guest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	guest "github.com/agcore/agrun/guest-sdk"
)

// A complete tool: the function's argument and result types are the call's
// arguments and result.
func ExampleRun() {
	type Args struct {
		Text string `json:"text"`
	}
	type Result struct {
		Words int `json:"words"`
	}
	guest.Run(func(ctx context.Context, in Args) (Result, error) {
		if in.Text == "" {
			return Result{}, errors.New(`"text" is empty`) // becomes {"error":"\"text\" is empty"}, exit 1
		}
		return Result{Words: len(strings.Fields(in.Text))}, nil
	})
}

// HTTPClient is a standard *http.Client; the host performs the request.
func ExampleHTTPClient() {
	resp, err := guest.HTTPClient().Get("https://api.open-meteo.com/v1/forecast?latitude=48.85&longitude=2.35&current_weather=true")
	switch {
	case errors.Is(err, guest.ErrNotGranted):
		fmt.Println("declare \"network\" in the manifest and ask the operator for allowed_hosts")
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Println(resp.StatusCode, len(body))
}

// Tool logic that takes its *http.Client can be tested natively with an
// httptest server; main passes guest.HTTPClient().
func ExampleHTTPClient_testable() {
	fetch := func(c *http.Client, url string) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// In the tool: fetch(guest.HTTPClient(), ...). On the host, without
	// agrun, the real client fails clearly:
	_, err := fetch(guest.HTTPClient(), "https://example.com/")
	fmt.Println(errors.Is(err, guest.ErrNoHost))
	// Output: true
}
