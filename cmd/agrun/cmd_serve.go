package main

import (
	"context"
	"errors"
)

// serve is `agrun serve [--addr ADDR]` (being written: see issue 8).
func (c *cli) serve(ctx context.Context, args []string) error {
	return errors.New("serve: not available yet")
}
