// Package pgstore is a session.Store in PostgreSQL, over pgx.
//
//	sessions, err := pgstore.New(ctx, "postgres://agrun@db/agrun")
//	defer sessions.Close()
package pgstore

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agcore/agrun/session"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sessions is a session.Store in PostgreSQL, through a pgx connection
// pool: table session_events(session_id, seq, data, created_at) with
// (session_id, seq) as the primary key, created by the embedded
// migrations (migrations/*.sql) when the store is opened.
//
// Records are stored as bytea, byte for byte: jsonb would reorder keys,
// drop duplicate keys and whitespace and so change the bytes a replayed
// session is compared with (JSON is still a convert_from(data,
// 'UTF8')::jsonb away for an operator's query).
//
// Append runs in one transaction holding a transaction-level advisory
// lock on the session (pg_advisory_xact_lock), so that concurrent appends
// to one session from any number of processes are serialised: of two at
// the same seq exactly one writes, the other finds the records there and
// reports written false. Delete takes the same lock. Appends to different
// sessions do not wait for each other (but for a hash collision of their
// ids, which only serialises them).
//
// It is safe for concurrent use. Close releases the pool.
type Sessions struct {
	pool *pgxpool.Pool
}

// Advisory lock keys: the migration lock (one bigint key) and the
// namespace of the per-session locks (the first of two int4 keys; the
// second is hashtext(session_id)). PostgreSQL keeps the one-key and
// two-key spaces apart.
const (
	migrateLockKey    int64 = 0x6167_7275_6e5f_6d67 // "agrun_mg"
	sessionLockSpace  int32 = 0x6167_7273           // "agrs"
	schemaMigrationsT       = "schema_migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// New connects to the PostgreSQL database dsn names (a URL
// "postgres://user:pass@host:port/db?sslmode=..." or key=value pairs, as
// libpq and pgx read them, PG* environment variables included; the
// pool holds up to pgx's default of max(4, CPUs) connections unless the
// DSN sets pool_max_conns), checks
// the connection and applies the migrations it has not applied yet. Many
// processes may start at once: the migrations run one process at a time
// under an advisory lock, each in one transaction, and each is recorded
// in schema_migrations. A database with migrations newer than this build
// knows is used as it is (migrations only add). Cancelling ctx aborts the
// start; it is not kept.
func New(ctx context.Context, dsn string) (*Sessions, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("session store: connect: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Sessions{pool: pool}, nil
}

// Close closes the pool, waiting for the connections in use to be
// returned. The store must not be used after.
func (s *Sessions) Close() { s.pool.Close() }

// migration is one numbered file of migrations/.
type migration struct {
	version int64
	name    string
	sql     string
}

// migrations returns the embedded migrations in order. Their names are
// NNNN_what.sql with distinct numbers.
func migrations() ([]migration, error) {
	ents, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range ents {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_what.sql", e.Name())
		}
		b, err := migrationFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share a number", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// migrate applies the migrations the database has not recorded, in one
// transaction under the migration lock: a process that starts while
// another migrates waits for it and then finds nothing to do, and a
// failed migration leaves the schema as it was.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockKey); err != nil {
			return fmt.Errorf("session store: migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schemaMigrationsT+` (
			version    bigint PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("session store: %s: %w", schemaMigrationsT, err)
		}
		rows, err := tx.Query(ctx, `SELECT version FROM `+schemaMigrationsT)
		if err != nil {
			return fmt.Errorf("session store: %s: %w", schemaMigrationsT, err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("session store: %s: %w", schemaMigrationsT, err)
		}
		for _, m := range ms {
			if slices.Contains(applied, m.version) {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("session store: migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schemaMigrationsT+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("session store: migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// lockSession takes the session's advisory lock for the rest of tx.
func lockSession(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, sessionLockSpace, id)
	return err
}

// Append writes recs at seq, seq+1, ... in one transaction (see
// session.Store): written false if the session holds a record at seq,
// session.ErrSeqGap past its end.
func (s *Sessions) Append(ctx context.Context, id string, seq int64, recs []json.RawMessage) (written bool, err error) {
	if err := session.CheckAppend(id, seq, recs); err != nil {
		return false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, id); err != nil {
			return err
		}
		var next int64
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(seq) + 1, 0) FROM session_events WHERE session_id = $1`, id).Scan(&next); err != nil {
			return err
		}
		switch {
		case seq < next:
			return nil
		case seq > next:
			return fmt.Errorf("%w: session %s: append at %d, next is %d", session.ErrSeqGap, id, seq, next)
		}
		rows := make([][]any, len(recs))
		for i, r := range recs {
			rows[i] = []any{id, seq + int64(i), []byte(r)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"session_events"}, []string{"session_id", "seq", "data"}, pgx.CopyFromRows(rows)); err != nil {
			if isUniqueViolation(err) {
				// A writer that does not take the lock got there
				// first: its records stand, as with any first writer.
				return errAppendConflict
			}
			return err
		}
		written = true
		return nil
	})
	if errors.Is(err, errAppendConflict) {
		return false, nil
	}
	if err != nil {
		written = false
		if !errors.Is(err, session.ErrSeqGap) {
			err = fmt.Errorf("append to session %s: %w", id, err)
		}
	}
	return written, err
}

// Load returns the session's records from seq from on, in order.
func (s *Sessions) Load(ctx context.Context, id string, from int64) ([]json.RawMessage, error) {
	if err := session.CheckLoad(id, from); err != nil {
		return nil, err
	}
	var out []json.RawMessage
	// One snapshot for the records and the existence check, so that a
	// Delete between the two cannot make an empty result look like a
	// session that exists.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT data FROM session_events WHERE session_id = $1 AND seq >= $2 ORDER BY seq`, id, from)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (json.RawMessage, error) {
			var b []byte
			err := r.Scan(&b)
			return json.RawMessage(b), err
		})
		if err != nil || len(out) > 0 {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_events WHERE session_id = $1)`, id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%w: session %s", session.ErrNotFound, id)
		}
		out = []json.RawMessage{}
		return nil
	})
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("load session %s: %w", id, err)
	}
	return out, nil
}

// List returns the ids of the sessions, sorted byte-wise.
func (s *Sessions) List(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT session_id FROM session_events ORDER BY session_id`)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	slices.Sort(ids) // the column is COLLATE "C" already; this keeps the promise whatever the schema
	return ids, nil
}

// Delete removes the session's records (session.ErrNotFound if it has none),
// under the session's lock so that it does not interleave with an Append.
func (s *Sessions) Delete(ctx context.Context, id string) error {
	if !session.ValidID(id) {
		return fmt.Errorf("%w: %q", session.ErrBadID, id)
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM session_events WHERE session_id = $1`, id)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: session %s", session.ErrNotFound, id)
	}
	return nil
}

// errAppendConflict rolls back an Append whose rows exist already.
var errAppendConflict = errors.New("records exist")

// isUniqueViolation reports whether err is PostgreSQL's unique_violation.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

var _ session.Store = (*Sessions)(nil)

// Summaries summarises every session (session.InfoOf) in one pass over
// the table, its last use the time of its last record's append
// (created_at, the server's clock), most recently used first.
func (s *Sessions) Summaries(ctx context.Context) ([]session.Info, error) {
	rows, err := s.pool.Query(ctx, `SELECT session_id, data, created_at FROM session_events ORDER BY session_id, seq`)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []session.Info
	var id string
	var recs []session.Record
	var last time.Time
	flush := func() {
		if id != "" {
			out = append(out, summary(id, recs, last))
		}
	}
	for rows.Next() {
		var sid string
		var data []byte
		var at time.Time
		if err := rows.Scan(&sid, &data, &at); err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		if sid != id {
			flush()
			id, recs, last = sid, recs[:0], time.Time{}
		}
		var r session.Record
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("list sessions: session %s: %w", sid, err)
		}
		recs = append(recs, r)
		if at.After(last) {
			last = at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	flush()
	session.SortInfos(out)
	return out, nil
}

// summary is the Info of session id from its records and its last
// append.
func summary(id string, recs []session.Record, last time.Time) session.Info {
	in := session.InfoOf(id, recs)
	in.Updated = last
	if in.Created.IsZero() {
		in.Created = last
	}
	return in
}

// Summary summarises session id as Summaries does.
func (s *Sessions) Summary(ctx context.Context, id string) (session.Info, error) {
	if !session.ValidID(id) {
		return session.Info{}, fmt.Errorf("%w: %q", session.ErrBadID, id)
	}
	var recs []session.Record
	var last time.Time
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT data, created_at FROM session_events WHERE session_id = $1 ORDER BY seq`, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var data []byte
			var at time.Time
			if err := rows.Scan(&data, &at); err != nil {
				return err
			}
			var r session.Record
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("record %d: %w", len(recs), err)
			}
			recs = append(recs, r)
			if at.After(last) {
				last = at
			}
		}
		return rows.Err()
	})
	if err != nil {
		return session.Info{}, fmt.Errorf("session %s: %w", id, err)
	}
	if len(recs) == 0 {
		return session.Info{}, fmt.Errorf("%w: session %s", session.ErrNotFound, id)
	}
	return summary(id, recs, last), nil
}

// RemoveSession removes session id (session.Admin) in one transaction
// under the session's advisory lock, so that it does not interleave with
// an Append: with a cutoff, only if its last record was appended before
// it. PostgreSQL sees no runs: a cluster wraps the store in
// session.Guarded, which refuses a session whose workflow runs.
func (s *Sessions) RemoveSession(ctx context.Context, id string, cutoff time.Time) (bool, error) {
	if !session.ValidID(id) {
		return false, fmt.Errorf("%w: %q", session.ErrBadID, id)
	}
	var removed, found bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, id); err != nil {
			return err
		}
		var last *time.Time
		if err := tx.QueryRow(ctx, `SELECT MAX(created_at) FROM session_events WHERE session_id = $1`, id).Scan(&last); err != nil {
			return err
		}
		if found = last != nil; !found || (!cutoff.IsZero() && !last.Before(cutoff)) {
			return nil
		}
		_, err := tx.Exec(ctx, `DELETE FROM session_events WHERE session_id = $1`, id)
		removed = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("delete session %s: %w", id, err)
	}
	if !found {
		return false, fmt.Errorf("%w: session %s", session.ErrNotFound, id)
	}
	return removed, nil
}

// CompactSession compacts session id in place (session.CompactRecords):
// in one transaction under the session's advisory lock it reads the
// records and rewrites those compaction changed at their seqs, so the
// session keeps its number of records and an Append never meets half a
// compaction. before and after are the sizes of its records' data.
func (s *Sessions) CompactSession(ctx context.Context, id string, keep int) (before, after int64, err error) {
	if !session.ValidID(id) {
		return 0, 0, fmt.Errorf("%w: %q", session.ErrBadID, id)
	}
	var recs []json.RawMessage
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSession(ctx, tx, id); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT seq, data FROM session_events WHERE session_id = $1 ORDER BY seq`, id)
		if err != nil {
			return err
		}
		var seqs []int64
		recs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (json.RawMessage, error) {
			var seq int64
			var b []byte
			err := r.Scan(&seq, &b)
			seqs = append(seqs, seq)
			return json.RawMessage(b), err
		})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return session.ErrNotFound
		}
		out, changed, err := session.CompactRecords(recs, keep)
		if err != nil {
			return err
		}
		for _, i := range changed {
			if _, err := tx.Exec(ctx, `UPDATE session_events SET data = $3 WHERE session_id = $1 AND seq = $2`, id, seqs[i], []byte(out[i])); err != nil {
				return err
			}
		}
		before, after = sizeOf(recs), sizeOf(out)
		return nil
	})
	if errors.Is(err, session.ErrNotFound) {
		return 0, 0, fmt.Errorf("%w: session %s", session.ErrNotFound, id)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("session %s: %w", id, err)
	}
	return before, after, nil
}

// sizeOf is the size of records' data.
func sizeOf(recs []json.RawMessage) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r))
	}
	return n
}

var _ session.Admin = (*Sessions)(nil)
