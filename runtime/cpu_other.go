//go:build !linux

package runtime

import "time"

// threadCPU is not measured outside Linux: Audit.CPU stays zero.
type threadCPU struct{}

func startThreadCPU() threadCPU       { return threadCPU{} }
func (threadCPU) stop() time.Duration { return 0 }
