package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/agcore/agrun/oci"
)

// KindRegistry is an OCI upload whose registry failed (unreachable, not
// found, refused the credentials): 502.
const KindRegistry Kind = "registry_error"

// ociPullTimeout bounds an OCI upload's pull, so that a slow registry
// does not hold an upload slot for ever.
const ociPullTimeout = 2 * time.Minute

// ociModule is the module an OCI upload's body ({"oci": REF}) names: ref
// must be pinned to a digest and its registry one of AllowedRegistries;
// the server pulls it (bounded and checked by package oci) and reads it
// back from its store.
func (s *Server) ociModule(ctx context.Context, body []byte) ([]byte, error) {
	var req struct {
		OCI string `json:"oci"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.OCI == "" || dec.More() {
		return nil, errorf(http.StatusBadRequest, KindBadRequest, `an upload sent as application/json is {"oci": "HOST/REPO[:TAG]@sha256:DIGEST"}`)
	}
	ref, err := oci.ParseRef(req.OCI)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, KindBadRequest, "%v", err)
	}
	if !ref.Pinned() {
		return nil, errorf(http.StatusBadRequest, KindBadRequest, "%q names no digest: pin it (HOST/REPO@sha256:DIGEST; agrun pull prints it)", ref.String())
	}
	if s.oci == nil || !slices.Contains(s.ociHosts, ref.Registry) {
		return nil, errorf(http.StatusForbidden, KindForbidden, "registry %q is not one this server pulls from ([serve] allowed_registries)", ref.Registry)
	}
	ctx, cancel := context.WithTimeout(ctx, ociPullTimeout)
	defer cancel()
	// A scratch store, removed when the upload is decided: what the
	// server keeps is the upload itself (its own store), so a refused one
	// leaves nothing behind, and the operator's [oci] dir is not touched.
	tmp, err := os.MkdirTemp("", "agrun-oci-upload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	scratch, err := oci.OpenStore(tmp)
	if err != nil {
		return nil, err
	}
	scratch.MaxModuleBytes = s.oci.MaxModuleBytes
	p, err := s.oci.PullTo(ctx, ref.String(), scratch)
	if err == nil {
		var wasm []byte
		if wasm, _, err = scratch.Module(ctx, p.Digest); err == nil {
			if int64(len(wasm)) > s.limits.MaxUpload {
				return nil, errorf(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "the module is %d bytes; the limit is %d", len(wasm), s.limits.MaxUpload)
			}
			return wasm, nil
		}
	}
	for _, refused := range []error{oci.ErrMediaType, oci.ErrLayers, oci.ErrIndex, oci.ErrTooLarge, oci.ErrDigest, oci.ErrNoPlugin} {
		if errors.Is(err, refused) {
			return nil, errorf(http.StatusUnprocessableEntity, KindModuleRefused, "%v", err)
		}
	}
	return nil, errorf(http.StatusBadGateway, KindRegistry, "%v", err)
}
