package session

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

// ApprovalsFile is the name, in the sessions folder, of the file that
// keeps the "always" decisions (OpenApprovals).
const ApprovalsFile = "approvals.json"

// maxApprovalsFile bounds what is read of it.
const maxApprovalsFile = 4 << 20

// StandingApproval is one "always" decision: the tool, and the grant it
// was given for. A call is approved by it only while the tool's grant is
// the same (GrantSHA256): a wider grant (a new mount, a new host, a
// higher limit) is asked about again.
type StandingApproval struct {
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
	Always  []StandingApproval `json:"always"`
}

// Approvals is the approvals file of one sessions folder: the calls a
// person answered "always" to, by tool and grant (loop.Approver
// implementations consult it; `agrun approvals` lists and revokes). Each
// change re-reads the file and replaces it atomically (internal/
// atomicfile), so a crash never leaves half a file; two processes
// changing it at the same instant may lose one change (the last rename
// wins), which at worst asks again.
type Approvals struct{ path string }

// OpenApprovals returns the approvals file of the sessions folder dir
// (ApprovalsFile in it; nothing is read or created until used).
func OpenApprovals(dir string) *Approvals {
	return &Approvals{path: filepath.Join(dir, ApprovalsFile)}
}

// Path is the file's path.
func (s *Approvals) Path() string { return s.path }

// GrantDigest identifies a grant: the SHA-256 of its JSON.
func GrantDigest(g registry.Grant) string {
	b, _ := json.Marshal(g)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// List reads the file; a missing file is an empty list.
func (s *Approvals) List() ([]StandingApproval, error) {
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

func (s *Approvals) save(list []StandingApproval) error {
	slices.SortFunc(list, func(a, b StandingApproval) int { return strings.Compare(a.Tool, b.Tool) })
	b, err := json.MarshalIndent(approvalsDoc{Version: 1, Always: list}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path, append(b, '\n'), 0o600)
}

// Has reports whether tool has a standing approval for grant g.
func (s *Approvals) Has(tool string, g registry.Grant) (bool, error) {
	list, err := s.List()
	if err != nil {
		return false, err
	}
	d := GrantDigest(g)
	return slices.ContainsFunc(list, func(a StandingApproval) bool { return a.Tool == tool && a.GrantSHA256 == d }), nil
}

// Add records a standing approval (its GrantSHA256 computed here),
// replacing the tool's earlier ones.
func (s *Approvals) Add(a StandingApproval) error {
	list, err := s.List()
	if err != nil {
		return err
	}
	a.GrantSHA256 = GrantDigest(a.Grant)
	list = slices.DeleteFunc(list, func(o StandingApproval) bool { return o.Tool == a.Tool })
	return s.save(append(list, a))
}

// Revoke removes the standing approvals of tool; false if it had none.
func (s *Approvals) Revoke(tool string) (bool, error) {
	list, err := s.List()
	if err != nil {
		return false, err
	}
	n := len(list)
	list = slices.DeleteFunc(list, func(o StandingApproval) bool { return o.Tool == tool })
	if len(list) == n {
		return false, nil
	}
	return true, s.save(list)
}
