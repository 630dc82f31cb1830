package oci

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"

	"io"
	"path"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// unpackers turn a layer, by media type, into the module it carries. Each
// reads at most the layer's size (at most max) from the registry, hashes
// every byte it reads and returns the module only if the layer matched
// its digest.
var unpackers = map[string]func(r io.Reader, layer ocispec.Descriptor, max int64) ([]byte, error){
	MediaTypeWasm:          wasmLayer,
	MediaTypeWasmLayer:     wasmLayer,
	MediaTypeTool:          wasmLayer,
	mediaTypeTarGzip:       tarLayer(true),
	mediaTypeDockerTarGzip: tarLayer(true),
	mediaTypeTar:           tarLayer(false),
}

// wasmLayer: the layer is the module.
func wasmLayer(r io.Reader, layer ocispec.Descriptor, max int64) ([]byte, error) {
	return readVerified(io.NopCloser(r), layer, max, "the layer")
}

// tarLayer: the layer is a (gzip) tar holding plugin.wasm, as hyper-mcp's
// plug-in images are built (FROM scratch, COPY plugin.wasm /). The
// compressed stream is hashed as it is read; the decompressed stream is
// bounded by max plus tarSlack, and plugin.wasm by max, so that no
// compression ratio makes agrun read more than that.
func tarLayer(gzipped bool) func(r io.Reader, layer ocispec.Descriptor, max int64) ([]byte, error) {
	return func(r io.Reader, layer ocispec.Descriptor, max int64) ([]byte, error) {
		h := sha256.New()
		raw := &countingReader{r: io.TeeReader(io.LimitReader(r, layer.Size+1), h)}
		var stream io.Reader = raw
		if gzipped {
			zr, err := gzip.NewReader(raw)
			if err != nil {
				return nil, fmt.Errorf("%w: the layer is not gzip: %v", ErrMediaType, err)
			}
			defer zr.Close()
			stream = zr
		}
		wasm, err := findPlugin(tar.NewReader(&capReader{r: stream, left: max + tarSlack}), max)
		if err != nil {
			return nil, err
		}
		// The rest of the layer is read (and hashed) too: the digest covers
		// all of it. It is at most layer.Size, itself at most max.
		if _, err := io.Copy(io.Discard, raw); err != nil {
			return nil, err
		}
		if raw.n > layer.Size {
			return nil, fmt.Errorf("%w: the layer is longer than the %d bytes its descriptor says", ErrDigest, layer.Size)
		}
		if err := verify(h.Sum(nil), raw.n, layer, "the layer"); err != nil {
			return nil, err
		}
		return wasm, nil
	}
}

// findPlugin returns the contents of plugin.wasm (at the tar's root).
func findPlugin(tr *tar.Reader, max int64) ([]byte, error) {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, ErrNoPlugin
		}
		if err != nil {
			return nil, wrapTar(err)
		}
		if path.Clean("/"+hdr.Name) != "/plugin.wasm" {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: plugin.wasm is not a regular file", ErrNoPlugin)
		}
		if hdr.Size > max {
			return nil, fmt.Errorf("%w: plugin.wasm is %d bytes, the module limit %d", ErrTooLarge, hdr.Size, max)
		}
		b, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err != nil {
			return nil, wrapTar(err)
		}
		return b, nil
	}
}

func wrapTar(err error) error {
	if errors.Is(err, ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w: the layer is not a valid tar stream: %v", ErrMediaType, err)
}

// capReader fails with ErrTooLarge once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("%w: the layer unpacks to more than the module limit allows", ErrTooLarge)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
