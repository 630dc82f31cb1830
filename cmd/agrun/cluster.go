//go:build cluster

package main

import (
	"context"
	"fmt"
	"github.com/agcore/agrun/cluster/store"
	"github.com/agcore/agrun/session/pgstore"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/agcore/agrun/cluster"
	"github.com/agcore/agrun/internal/cli/config"
	"github.com/agcore/agrun/session"
)

// clusterSupport says whether this build runs [cluster] (agrun version).
const clusterSupport = true

// clusterEnv is what a process of a cluster shares with the others: the
// Temporal client and the stores of [cluster].
type clusterEnv struct {
	cfg      *config.Config
	temporal client.Client
	sessions session.Store
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
		ce.sessions = st
	}
	// Modules and payloads.
	objs, err := clusterObjects(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ce.objects = objs
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
	return recs, true, err
}

func (c *cli) decodeRecords(ctx context.Context, st session.Store, id string) ([]session.Record, error) {
	raw, err := st.Load(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	recs, err := session.DecodeRecords(raw)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return recs, nil
}
