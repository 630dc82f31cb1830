package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agcore/agrun/server"
)

// TestRequireBearer: only a request carrying one of the tokens reaches
// the handler; a missing, wrong or prefixed-but-empty token goes to the
// refusal; no tokens means no check.
func TestRequireBearer(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	h := server.RequireBearer([]string{"first-token-0123456789", "second-token-0123456789"}, ok, refuse)
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"Bearer first-token-0123456789", http.StatusNoContent},
		{"bearer second-token-0123456789 ", http.StatusNoContent},
		{"", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer first-token-012345678", http.StatusUnauthorized},
		{"Basic first-token-0123456789", http.StatusUnauthorized},
		{"first-token-0123456789", http.StatusUnauthorized},
	} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, w.Code, tc.want)
		}
	}
	w := httptest.NewRecorder()
	server.RequireBearer(nil, ok, refuse).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	if w.Code != http.StatusNoContent {
		t.Errorf("no tokens: %d, want the handler's 204", w.Code)
	}
}
