//go:build !unix

package runtime

func cpuTime() int64 { return -1 }
