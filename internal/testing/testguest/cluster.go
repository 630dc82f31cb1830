//go:build cluster

package testguest

// A test binary built with -tags cluster (scripts/test.sh builds every
// package so) builds the agrun command with it too: Agrun.
func init() { agrunFlags = []string{"-tags", "cluster"} }
