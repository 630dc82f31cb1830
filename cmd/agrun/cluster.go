//go:build cluster

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/cluster/pgstore"
	"github.com/agcore/agrun/cluster/s3store"
	"github.com/agcore/agrun/cluster/store"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/cmd/agrun/internal/config"
	"github.com/agcore/agrun/session"
	"github.com/agcore/agrun/loop"
)

// clusterSupport says whether this build runs [cluster] (agrun version).
const clusterSupport = true

// clusterEnv is what a process of a cluster shares with the others: the
// Temporal client and the stores of [cluster].
type clusterEnv struct {
	cfg      *config.Config
	temporal client.Client
	sessions store.SessionStore
	objects  store.ObjectStore
	queues   cluster.Queues
	closers  []func()
}

func (ce *clusterEnv) close() {
	for i := len(ce.closers) - 1; i >= 0; i-- {
		ce.closers[i]()
	}
}

// namespace is the Temporal namespace in use.
func (ce *clusterEnv) namespace() string {
	if ns := ce.cfg.Cluster.Namespace; ns != "" {
		return ns
	}
	return "default"
}

// defaultDSNEnv is the variable holding the PostgreSQL connection string
// when [cluster] postgres_dsn_env is unset.
const defaultDSNEnv = "AGRUN_POSTGRES_DSN"

// openCluster dials Temporal and opens the stores of cfg's [cluster].
// Errors name the key to fix; an unreachable Temporal says so at once
// (the SDK's dial checks the server).
func (c *cli) openCluster(ctx context.Context, cfg *config.Config) (*clusterEnv, error) {
	cc := cfg.Cluster
	ce := &clusterEnv{cfg: cfg, queues: cluster.QueuesFor(cc.TaskQueuePrefix)}
	ok := false
	defer func() {
		if !ok {
			ce.close()
		}
	}()
	// Sessions.
	switch cc.SessionStore {
	case "postgres":
		name := cc.PostgresDSNEnv
		if name == "" {
			name = defaultDSNEnv
		}
		dsn := os.Getenv(name)
		if dsn == "" {
			return nil, &configError{fmt.Errorf("%s is not set ([cluster] postgres_dsn_env): the PostgreSQL connection string of session_store = \"postgres\"", name)}
		}
		pg, err := pgstore.New(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("[cluster] session_store: %w", err)
		}
		ce.sessions = pg
		ce.closers = append(ce.closers, pg.Close)
	default:
		st, err := c.sessionStoreFor(cfg)
		if err != nil {
			return nil, err
		}
		ce.sessions = dirSessions{st}
	}
	// Modules and payloads.
	switch m := cc.ModuleStore; {
	case strings.HasPrefix(m, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(m, "s3://"), "/")
		s3, err := s3store.New(ctx, s3store.Config{Bucket: bucket, Prefix: prefix, Endpoint: cc.S3Endpoint, Region: cc.S3Region, UsePathStyle: cc.S3PathStyle})
		if err != nil {
			return nil, fmt.Errorf("[cluster] module_store: %w", err)
		}
		ce.objects = s3
	default:
		dir := m
		if dir == "" {
			dir = filepath.Join(filepath.Dir(session.DefaultDir()), "cluster")
		} else if !filepath.IsAbs(dir) && cfg.Path != "" {
			dir = filepath.Join(filepath.Dir(cfg.Path), dir)
		}
		objs, err := store.NewDirObjects(dir)
		if err != nil {
			return nil, fmt.Errorf("[cluster] module_store: %w", err)
		}
		ce.objects = objs
	}
	// Temporal.
	ns := ce.namespace()
	tc, err := client.DialContext(ctx, client.Options{
		HostPort:  cc.TemporalAddress,
		Namespace: ns,
		Logger:    tlog.NewStructuredLogger(slog.New(temporalLogHandler{c.logger().Handler()})),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s ([cluster] temporal_address): %w", cc.TemporalAddress, err)
	}
	ce.temporal = tc
	ce.closers = append(ce.closers, tc.Close)
	ok = true
	return ce, nil
}

// temporalLogHandler passes the SDK's log on at one level lower: its
// INFO lines (a worker started, polling) are agrun's debug detail.
type temporalLogHandler struct{ slog.Handler }

func (h temporalLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if l < slog.LevelWarn {
		l -= 4
	}
	return h.Handler.Enabled(ctx, l)
}

func (h temporalLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		r.Level -= 4
	}
	return h.Handler.Handle(ctx, r)
}

// runDefaults are the run settings of cfg.
func runDefaults(cfg *config.Config, q cluster.Queues) cluster.RunInput {
	return cluster.RunInput{
		Queues:           q,
		MaxTurns:         cfg.LLM.MaxTurns,
		RetrySideEffects: cfg.Cluster.RetrySideEffects,
		HeartbeatTimeout: cfg.Cluster.HeartbeatTimeout.Std(),
	}
}

// --- the session store of the local path, for the cluster ---

// dirSessions is store.SessionStore over the [sessions] directory: the
// same JSON-lines files as the local path (so `agrun sessions`, `agrun
// audit` read cluster sessions too), each step's records appended in one
// write under the session's lock. A batch is atomic per line, not as a
// whole: a worker killed in the middle of a write leaves the lines before
// the cut (the PostgreSQL store is atomic per batch).
type dirSessions struct{ st *session.Store }

func (d dirSessions) Append(ctx context.Context, id string, seq int64, recs []json.RawMessage) (bool, error) {
	if !session.ValidID(id) {
		return false, fmt.Errorf("session %q: %w", id, session.ErrBadID)
	}
	rs := make([]session.Record, len(recs))
	for i, b := range recs {
		if err := json.Unmarshal(b, &rs[i]); err != nil {
			return false, fmt.Errorf("session %q: record %d: %w", id, i, err)
		}
	}
	var s *session.Session
	var err error
	// Another process may hold the session for an instant (a reader
	// does not lock; a writer does): wait for it a little.
	for wait := 10 * time.Millisecond; ; wait *= 2 {
		s, _, _, err = d.st.Open(id)
		if !errors.Is(err, session.ErrLocked) || wait > 2*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(wait)
	}
	if err != nil {
		return false, err
	}
	defer s.Close()
	have, _, err := d.st.Records(id)
	if err != nil {
		return false, err
	}
	switch n := int64(len(have)); {
	case seq < n:
		return false, nil
	case seq > n:
		return false, fmt.Errorf("%w: session %s has %d records, not %d", store.ErrSeqGap, id, n, seq)
	}
	if err := s.AppendRecords(rs); err != nil {
		return false, err
	}
	return true, nil
}

func (d dirSessions) Load(ctx context.Context, id string, from int64) ([]json.RawMessage, error) {
	recs, _, err := d.st.Records(id)
	if errors.Is(err, session.ErrNotFound) {
		return nil, fmt.Errorf("%w: session %s", store.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	if from > int64(len(recs)) {
		from = int64(len(recs))
	}
	out := make([]json.RawMessage, 0, len(recs)-int(from))
	for _, r := range recs[from:] {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (d dirSessions) List(context.Context) ([]string, error) {
	infos, err := d.st.List()
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(infos))
	for i, in := range infos {
		ids[i] = in.ID
	}
	return ids, nil
}

func (d dirSessions) Delete(_ context.Context, id string) error {
	err := d.st.Remove(id)
	if errors.Is(err, session.ErrNotFound) {
		return fmt.Errorf("%w: session %s", store.ErrNotFound, id)
	}
	return err
}

// sessionRecords is cluster.Records in the session package's formats.
type sessionRecords struct{}

func (sessionRecords) record(set func(*session.Record, json.RawMessage), v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	r := session.Record{Time: time.Now().UTC()}
	set(&r, b)
	return json.Marshal(r)
}

func (s sessionRecords) Message(m loop.Message) (json.RawMessage, error) {
	return s.record(func(r *session.Record, b json.RawMessage) { r.Message = b }, m)
}

func (s sessionRecords) Request(ri loop.RequestInfo) (json.RawMessage, error) {
	return s.record(func(r *session.Record, b json.RawMessage) { r.Request = b }, ri)
}

func (s sessionRecords) Call(ev *loop.ToolExecutionCompleted) (json.RawMessage, error) {
	return s.record(func(r *session.Record, b json.RawMessage) { r.Call = b }, session.CallOf(ev))
}

func (s sessionRecords) Decision(d loop.DecisionRecord) (json.RawMessage, error) {
	return s.record(func(r *session.Record, b json.RawMessage) { r.Decision = b }, d)
}

func (sessionRecords) Approved(recs []json.RawMessage) map[string]bool {
	ok := map[string]bool{}
	for _, b := range recs {
		var r session.Record
		if json.Unmarshal(b, &r) != nil || len(r.Decision) == 0 {
			continue
		}
		var d loop.DecisionRecord
		if json.Unmarshal(r.Decision, &d) == nil && d.Answer.Approved() {
			ok[d.CallID] = true
		}
	}
	return ok
}

func (sessionRecords) History(recs []json.RawMessage) ([]loop.Message, error) {
	var msgs []json.RawMessage
	for i, b := range recs {
		var r session.Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		if len(r.Message) > 0 {
			msgs = append(msgs, r.Message)
		}
	}
	return session.Decode[loop.Message](msgs)
}

// pgSessions opens the cluster's session store for `agrun sessions` when
// [cluster] session_store is "postgres" (ok false otherwise: the local
// files are the store, read as ever).
func (c *cli) pgSessions(ctx context.Context) (*pgstore.Sessions, bool, error) {
	cfg, err := c.loadConfig()
	if err != nil || !cfg.Cluster.Enabled() || cfg.Cluster.SessionStore != "postgres" {
		return nil, false, err
	}
	name := cfg.Cluster.PostgresDSNEnv
	if name == "" {
		name = defaultDSNEnv
	}
	dsn := os.Getenv(name)
	if dsn == "" {
		return nil, true, &configError{fmt.Errorf("%s is not set ([cluster] postgres_dsn_env): the PostgreSQL connection string of session_store = \"postgres\"", name)}
	}
	pg, err := pgstore.New(ctx, dsn)
	if err != nil {
		return nil, true, fmt.Errorf("[cluster] session_store: %w", err)
	}
	return pg, true, nil
}

// sharedSessions lists the sessions of the cluster's PostgreSQL store,
// each summarised from its records (ok false: the local store is used).
func (c *cli) sharedSessions() ([]session.Info, bool, error) {
	ctx := context.Background()
	pg, ok, err := c.pgSessions(ctx)
	if !ok || err != nil {
		return nil, ok, err
	}
	defer pg.Close()
	ids, err := pg.List(ctx)
	if err != nil {
		return nil, true, err
	}
	var infos []session.Info
	for _, id := range ids {
		recs, err := c.decodeRecords(ctx, pg, id)
		if err != nil {
			return nil, true, err
		}
		infos = append(infos, session.InfoOf(id, recs))
	}
	return infos, true, nil
}

// sharedRecords returns a session's records from the cluster's
// PostgreSQL store (ok false: the local store is used).
func (c *cli) sharedRecords(id string) ([]session.Record, bool, error) {
	ctx := context.Background()
	pg, ok, err := c.pgSessions(ctx)
	if !ok || err != nil {
		return nil, ok, err
	}
	defer pg.Close()
	recs, err := c.decodeRecords(ctx, pg, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, true, fmt.Errorf("session %q: %w", id, session.ErrNotFound)
	}
	return recs, true, err
}

func (c *cli) decodeRecords(ctx context.Context, st store.SessionStore, id string) ([]session.Record, error) {
	raw, err := st.Load(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	recs := make([]session.Record, 0, len(raw))
	for i, b := range raw {
		var r session.Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("session %s: record %d: %w", id, i, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
