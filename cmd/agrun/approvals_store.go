package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agcore/agrun/internal/atomicfile"
	"github.com/agcore/agrun/registry"
)

// approvalsFile is the name, in the sessions folder, of the file that
// keeps the "always" decisions.
const approvalsFile = "approvals.json"

// maxApprovalsFile bounds what is read of it.
const maxApprovalsFile = 4 << 20

// standingApproval is one "always" decision: the tool, and the grant it
// was given for. A call is approved by it only while the tool's grant is
// the same (GrantSHA256): a wider grant (a new mount, a new host, a
// higher limit) is asked about again.
type standingApproval struct {
	Tool        string         `json:"tool"`
	GrantSHA256 string         `json:"grant_sha256"`
	Grant       registry.Grant `json:"grant"`
	Time        time.Time      `json:"time"`
	By          string         `json:"by"`
	Session     string         `json:"session,omitempty"` // where it was given
}

// approvalsDoc is the file's content.
type approvalsDoc struct {
	Version int                `json:"version"`
	Always  []standingApproval `json:"always"`
}

// approvalStore is the approvals file of one sessions folder. Each
// change re-reads the file and replaces it atomically (internal/
// atomicfile), so a crash never leaves half a file; two processes
// changing it at the same instant may lose one change (the last rename
// wins), which at worst asks again.
type approvalStore struct{ path string }

func newApprovalStore(sessionsDir string) *approvalStore {
	return &approvalStore{path: filepath.Join(sessionsDir, approvalsFile)}
}

// grantDigest identifies a grant: the SHA-256 of its JSON.
func grantDigest(g registry.Grant) string {
	b, _ := json.Marshal(g)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// load reads the file; a missing file is an empty list.
func (s *approvalStore) load() ([]standingApproval, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var doc approvalsDoc
	dec := json.NewDecoder(io.LimitReader(f, maxApprovalsFile))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w (remove the file to forget every standing approval)", s.path, err)
	}
	return doc.Always, nil
}

func (s *approvalStore) save(list []standingApproval) error {
	slices.SortFunc(list, func(a, b standingApproval) int { return strings.Compare(a.Tool, b.Tool) })
	b, err := json.MarshalIndent(approvalsDoc{Version: 1, Always: list}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path, append(b, '\n'), 0o600)
}

// has reports whether tool has a standing approval for grant g.
func (s *approvalStore) has(tool string, g registry.Grant) (bool, error) {
	list, err := s.load()
	if err != nil {
		return false, err
	}
	d := grantDigest(g)
	return slices.ContainsFunc(list, func(a standingApproval) bool { return a.Tool == tool && a.GrantSHA256 == d }), nil
}

// add records a standing approval of tool for g, replacing the tool's
// earlier ones.
func (s *approvalStore) add(a standingApproval) error {
	list, err := s.load()
	if err != nil {
		return err
	}
	a.GrantSHA256 = grantDigest(a.Grant)
	list = slices.DeleteFunc(list, func(o standingApproval) bool { return o.Tool == a.Tool })
	return s.save(append(list, a))
}

// revoke removes the standing approvals of tool; false if it had none.
func (s *approvalStore) revoke(tool string) (bool, error) {
	list, err := s.load()
	if err != nil {
		return false, err
	}
	n := len(list)
	list = slices.DeleteFunc(list, func(o standingApproval) bool { return o.Tool == tool })
	if len(list) == n {
		return false, nil
	}
	return true, s.save(list)
}
