package registry

import (
	"context"
	"encoding/json"
	"github.com/agcore/agrun/internal/audit"
)

// Audit is what one call did as its tool's host saw it (the one audit
// type: package audit): the sandbox's view for a WASM tool, with its
// strings cleaned; the bytes sent and received for an MCP tool.
type Audit = audit.Call

// MountAudit is what a guest did under one mount.
type MountAudit = audit.Mount

// PathAudit is what a guest did to one guest path.
type PathAudit = audit.Path

// RequestAudit is one HTTP request a guest made (never headers or
// bodies).
type RequestAudit = audit.Request

// An AuditedTool is a Tool that reports what each call did. The Registry
// calls ExecuteAudited instead of Execute and puts the Audit in the
// Invocation; the result and error mean what Execute's do. The Audit may
// be nil (nothing recorded), and is set for failed calls too when the
// tool ran.
type AuditedTool interface {
	Tool
	ExecuteAudited(ctx context.Context, args json.RawMessage) (json.RawMessage, *Audit, error)
}
