package main

import (
	"os"
	"syscall"
)

//go:wasmimport wasi_snapshot_preview1 fd_filestat_set_times
//go:noescape
func fdFilestatSetTimes(fd int32, atim, mtim int64, flags uint32) uint32

// futimens sets both times on an open descriptor (fd_filestat_set_times);
// Go's syscall package has no wasip1 Futimens.
func futimens(f *os.File, ts []syscall.Timespec) error {
	const setAtim, setMtim = 1, 4
	if e := fdFilestatSetTimes(int32(f.Fd()), ts[0].Nano(), ts[1].Nano(), setAtim|setMtim); e != 0 {
		return syscall.Errno(e)
	}
	return nil
}
