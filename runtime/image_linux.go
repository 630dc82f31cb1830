//go:build linux && (amd64 || arm64)

package runtime

import (
	"fmt"
	"syscall"
	"unsafe"
)

const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2
	fAddSeals       = 1033
	sealAll         = 0x1 | 0x2 | 0x4 | 0x8 // F_SEAL_SEAL, SHRINK, GROW, WRITE
)

// memImage is a module's initial memory in a sealed memfd.
type memImage struct {
	data []byte // the image itself, copied in if mapping fails
	fd   int
	size int // mapped length: the image rounded up to whole pages
}

// newImage writes data to a sealed memfd. A nil image and an error mean
// the caller falls back to letting wazero apply the data segments.
func newImage(data []byte) (*memImage, error) {
	name := []byte("agrun-image\x00")
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdCloexec|mfdAllowSealing, 0)
	if errno != 0 {
		return nil, fmt.Errorf("memfd_create: %w", errno)
	}
	img := &memImage{data: data, fd: int(fd), size: pageAlign(len(data))}
	for off := 0; off < len(data); {
		n, err := syscall.Write(img.fd, data[off:])
		if err != nil {
			img.close()
			return nil, fmt.Errorf("writing the memory image: %w", err)
		}
		off += n
	}
	if err := syscall.Ftruncate(img.fd, int64(img.size)); err != nil {
		img.close()
		return nil, fmt.Errorf("sizing the memory image: %w", err)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(img.fd), fAddSeals, sealAll); errno != 0 {
		img.close()
		return nil, fmt.Errorf("sealing the memory image: %w", errno)
	}
	return img, nil
}

// mapInto maps the image copy-on-write over the start of mem, which must
// be a page-aligned mapping at least img.size long.
func (img *memImage) mapInto(mem []byte) error {
	if len(mem) < img.size {
		return fmt.Errorf("memory image of %d bytes does not fit in %d", img.size, len(mem))
	}
	_, _, errno := syscall.Syscall6(syscall.SYS_MMAP, uintptr(unsafe.Pointer(&mem[0])), uintptr(img.size),
		syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_FIXED, uintptr(img.fd), 0)
	if errno != 0 {
		return fmt.Errorf("mapping the memory image: %w", errno)
	}
	return nil
}

func (img *memImage) close() {
	if img != nil && img.fd >= 0 {
		syscall.Close(img.fd)
		img.fd = -1
	}
}
