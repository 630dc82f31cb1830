//go:build !linux || !(amd64 || arm64)

package runtime

import "errors"

// memImage is unavailable here: wazero applies the (merged) data segments.
type memImage struct{ data []byte }

func newImage([]byte) (*memImage, error) {
	return nil, errors.New("memory images are not supported on this platform")
}

func (*memImage) mapInto([]byte) error {
	return errors.New("memory images are not supported on this platform")
}

func (*memImage) close() {}
