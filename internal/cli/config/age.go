package config

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

var ageRE = regexp.MustCompile(`^([0-9]+)([dhm])$`)

// ParseAge parses an age, as `sessions prune --older-than` and `audit
// --since` take it: a whole number of days, hours or minutes ("30d",
// "12h", "90m"), or any positive Go duration ("1h30m"). Zero, a negative
// age, one too large for a time.Duration, and anything else are errors.
func ParseAge(s string) (time.Duration, error) {
	if m := ageRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		unit := map[string]time.Duration{"d": 24 * time.Hour, "h": time.Hour, "m": time.Minute}[m[2]]
		if err != nil || n > int64(1<<62)/int64(unit) {
			return 0, fmt.Errorf("%q is too large", s)
		}
		if n == 0 {
			return 0, fmt.Errorf("%q: the age must be more than zero", s)
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not an age: use a number and d, h or m (30d, 12h, 90m)", s)
	}
	return d, nil
}
