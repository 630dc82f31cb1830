//go:build cluster

package setup

import (
	"context"
	"fmt"
	"github.com/agcore/agrun/cluster/s3store"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/session/pgstore"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/loop"
	"github.com/agcore/agrun/session"
)

// Cluster is what a process of a cluster shares with the others: the
// Temporal client and the stores of [cluster]. Close it when done.
type Cluster struct {
	// Config is the configuration it was opened from.
	Config *config.Config
	// Temporal is the client of [cluster] temporal_address.
	Temporal client.Client
	// Sessions is [cluster] session_store: PostgreSQL, or the local files.
	Sessions session.Store
	// Objects is [cluster] module_store (ClusterObjects).
	Objects store.ObjectStore
	// Queues are the task queues of [cluster] task_queue_prefix.
	Queues  cluster.Queues
	closers []func()
}

// Close closes the Temporal client and the stores.
func (ce *Cluster) Close() {
	for i := len(ce.closers) - 1; i >= 0; i-- {
		ce.closers[i]()
	}
}

// Namespace is the Temporal namespace in use.
func (ce *Cluster) Namespace() string {
	if ns := ce.Config.Cluster.Namespace; ns != "" {
		return ns
	}
	return "default"
}

// defaultDSNEnv is the variable holding the PostgreSQL connection string
// when [cluster] postgres_dsn_env is unset.
const defaultDSNEnv = "AGRUN_POSTGRES_DSN"

// OpenCluster dials Temporal and opens the stores of cfg's [cluster];
// the Temporal SDK logs to log, one level lower. Errors name the key to
// fix; an unreachable Temporal says so at once (the SDK's dial checks the
// server).
func OpenCluster(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Cluster, error) {
	cc := cfg.Cluster
	ce := &Cluster{Config: cfg, Queues: cluster.QueuesFor(cc.TaskQueuePrefix)}
	ok := false
	defer func() {
		if !ok {
			ce.Close()
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
			return nil, &ConfigError{fmt.Errorf("%s is not set ([cluster] postgres_dsn_env): the PostgreSQL connection string of session_store = \"postgres\"", name)}
		}
		pg, err := pgstore.New(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("[cluster] session_store: %w", err)
		}
		ce.Sessions = pg
		ce.closers = append(ce.closers, pg.Close)
	default:
		st, err := SessionStore(cfg)
		if err != nil {
			return nil, err
		}
		ce.Sessions = st
	}
	// Modules and payloads.
	objs, err := ClusterObjects(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ce.Objects = objs
	// Temporal.
	ns := ce.Namespace()
	tc, err := client.DialContext(ctx, client.Options{
		HostPort:  cc.TemporalAddress,
		Namespace: ns,
		Logger:    tlog.NewStructuredLogger(slog.New(temporalLogHandler{log.Handler()})),
	})
	if err != nil {
		return nil, fmt.Errorf("cannot reach Temporal at %s ([cluster] temporal_address): %w", cc.TemporalAddress, err)
	}
	ce.Temporal = tc
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

// RunDefaults are the run settings of cfg.
func RunDefaults(cfg *config.Config, q cluster.Queues) cluster.RunInput {
	return cluster.RunInput{
		Queues:           q,
		MaxTurns:         cfg.LLM.MaxTurns,
		RetrySideEffects: cfg.Cluster.RetrySideEffects,
		HeartbeatTimeout: cfg.Cluster.HeartbeatTimeout.Std(),
		ApprovalTimeout:  cfg.Cluster.ApprovalTimeout.Std(),
	}
}

// ClusterModels are the providers of [cluster] models, by name: each
// [llm] with that model (cluster.Activities.Models), so that a worker
// answers a run's `-m` only with a model its config names.
func ClusterModels(cfg *config.Config) (map[string]loop.Provider, error) {
	out := map[string]loop.Provider{}
	for _, m := range cfg.Cluster.Models {
		l := cfg.LLM
		l.Model = m
		p, err := Provider(&l)
		if err != nil {
			return nil, &ConfigError{fmt.Errorf("[cluster] models %q: %w", m, err)}
		}
		out[m] = p
	}
	return out, nil
}

// pgSessions opens the cluster's session store for `agrun sessions` when
// [cluster] session_store is "postgres" (ok false otherwise: the local
// files are the store, read as ever).
func pgSessions(ctx context.Context, cfg *config.Config) (*pgstore.Sessions, bool, error) {
	if !cfg.Cluster.Enabled() || cfg.Cluster.SessionStore != "postgres" {
		return nil, false, nil
	}
	name := cfg.Cluster.PostgresDSNEnv
	if name == "" {
		name = defaultDSNEnv
	}
	dsn := os.Getenv(name)
	if dsn == "" {
		return nil, true, &ConfigError{fmt.Errorf("%s is not set ([cluster] postgres_dsn_env): the PostgreSQL connection string of session_store = \"postgres\"", name)}
	}
	pg, err := pgstore.New(ctx, dsn)
	if err != nil {
		return nil, true, fmt.Errorf("[cluster] session_store: %w", err)
	}
	return pg, true, nil
}

// runCheckTimeout bounds the question to Temporal whether a session's
// run is going on (SessionAdmin).
const runCheckTimeout = 15 * time.Second

// SessionAdmin opens the store `agrun sessions` works on, and where names
// it in messages: with [cluster] session_store = "postgres", the
// cluster's PostgreSQL, wrapped in session.Guarded so that rm, prune and
// compact refuse a session whose workflow runs (cluster.Running, asked
// of [cluster] temporal_address only then: listing, show and export need
// no Temporal); else the sessions folder, guarded the same way when
// [cluster] is on (its workers hold a session's file only while they
// append). close releases it.
func SessionAdmin(ctx context.Context, cfg *config.Config, log *slog.Logger) (st session.Admin, where string, close func(), err error) {
	pg, ok, err := pgSessions(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	var admin session.Admin = pg
	where, closeStore := "the cluster's session store", func() { pg.Close() }
	if !ok {
		files, err := SessionStore(cfg)
		if err != nil {
			return nil, "", nil, err
		}
		if !cfg.Cluster.Enabled() {
			return files, files.Dir(), func() {}, nil
		}
		// The cluster's workers lock a session file only while they
		// append, so a run waiting for an approval or between steps
		// does not hold it: ask Temporal, as for PostgreSQL.
		admin, where, closeStore = files, files.Dir(), func() {}
	}
	addr := cfg.Cluster.TemporalAddress
	tc, err := client.NewLazyClient(client.Options{
		HostPort:  addr,
		Namespace: (&Cluster{Config: cfg}).Namespace(),
		Logger:    tlog.NewStructuredLogger(slog.New(temporalLogHandler{log.Handler()})),
	})
	if err != nil {
		closeStore()
		return nil, "", nil, fmt.Errorf("[cluster] temporal_address %s: %w", addr, err)
	}
	inUse := func(ctx context.Context, id string) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, runCheckTimeout)
		defer cancel()
		busy, err := cluster.Running(ctx, tc, id)
		if err != nil {
			return false, fmt.Errorf("cannot ask Temporal at %s ([cluster] temporal_address): %w", addr, err)
		}
		return busy, nil
	}
	return &session.Guarded{Admin: admin, InUse: inUse}, where, func() { tc.Close(); closeStore() }, nil
}

// ClusterObjects opens [cluster] module_store: S3 (s3://bucket/prefix)
// or a directory (relative to the config; "": one beside the sessions
// folder). Uploaded modules, payloads passed by reference and, with
// [cluster], what `agrun pull` fetched (OCIStore) live there.
func ClusterObjects(ctx context.Context, cfg *config.Config) (store.ObjectStore, error) {
	cc := cfg.Cluster
	switch m := cc.ModuleStore; {
	case strings.HasPrefix(m, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(m, "s3://"), "/")
		s3, err := s3store.New(ctx, s3store.Config{Bucket: bucket, Prefix: prefix, Endpoint: cc.S3Endpoint, Region: cc.S3Region, UsePathStyle: cc.S3PathStyle})
		if err != nil {
			return nil, fmt.Errorf("[cluster] module_store: %w", err)
		}
		return s3, nil
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
		return objs, nil
	}
}
