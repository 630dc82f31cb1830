package guesthttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agcore/agrun/guest-sdk/guesthttp"
)

// Client is a standard *http.Client; the host performs the request.
func ExampleClient() {
	resp, err := guesthttp.Client().Get("https://api.open-meteo.com/v1/forecast?latitude=48.85&longitude=2.35&current_weather=true")
	switch {
	case errors.Is(err, guesthttp.ErrNotGranted):
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
// httptest server; main passes guesthttp.Client().
func ExampleClient_testable() {
	fetch := func(c *http.Client, url string) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	// In the tool: fetch(guesthttp.Client(), ...). On the host, without
	// agrun, the real client fails clearly:
	_, err := fetch(guesthttp.Client(), "https://example.com/")
	fmt.Println(errors.Is(err, guesthttp.ErrNoHost))
	// Output: true
}
