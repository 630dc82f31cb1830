package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "45s": 45 * time.Second} {
		if got, err := ParseAge(in); err != nil || got != want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"0d":                    "more than zero",
		"-1h":                   "not an age",
		"0s":                    "not an age",
		"30 days":               "not an age",
		"":                      "not an age",
		"99999999999999999999d": "too large",
		"9999999999d":           "too large",
	} {
		if _, err := ParseAge(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAge(%q): %v, want an error saying %q", in, err, want)
		}
	}
}
