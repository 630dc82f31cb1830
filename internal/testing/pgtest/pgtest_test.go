//go:build linux

package pgtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agcore/agrun/internal/testing/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestStart: two Starts give two empty databases of one server, each
// usable, and the server does not run as root.
func TestStart(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.Start(t), pgtest.Start(t)
	if a == b {
		t.Fatalf("two Starts gave one database: %s", a)
	}
	for i, dsn := range []string{a, b} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `CREATE TABLE t (n int)`); err != nil {
			t.Fatalf("database %d: %v", i, err)
		}
		var super bool
		var user string
		if err := conn.QueryRow(ctx, `SELECT current_user, usesuper FROM pg_user WHERE usename = current_user`).Scan(&user, &super); err != nil {
			t.Fatal(err)
		}
		if user != "postgres" || !super {
			t.Errorf("connected as %q (superuser %v), want the postgres superuser", user, super)
		}
	}
	conn, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The server process's own user: pg_stat_activity does not say, but
	// the data directory's owner is the user postgres runs as.
	var dataDir string
	if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if uid := statUID(fi); uid == 0 {
		t.Errorf("data directory %s is root's: the server would refuse to run", dataDir)
	}
}

// TestStartWithoutPostgres: without the binaries Start skips, naming the
// setup script, and fails instead under AGRUN_REQUIRE_CLUSTER=1. The
// test binary runs itself with $AGRUN_PG_BIN pointing at nothing.
func TestStartWithoutPostgres(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		pgtest.Start(t)
		t.Fatal("Start returned without PostgreSQL")
	}
	for _, c := range []struct {
		require  string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP: TestStartWithoutPostgres"},
		{"1", true, "AGRUN_REQUIRE_CLUSTER=1"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartWithoutPostgres$", "-test.v")
		cmd.Env = append(os.Environ(), "PGTEST_CHILD=1", "AGRUN_PG_BIN="+t.TempDir(), "AGRUN_REQUIRE_CLUSTER="+c.require)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.wantFail {
			t.Errorf("AGRUN_REQUIRE_CLUSTER=%q: failed %v, want %v:\n%s", c.require, failed, c.wantFail, out)
		}
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "PostgreSQL") {
			t.Errorf("AGRUN_REQUIRE_CLUSTER=%q: output lacks %q:\n%s", c.require, c.want, out)
		}
		if c.require == "" && !strings.Contains(string(out), "scripts/setup-cluster.sh") {
			t.Errorf("the skip does not name scripts/setup-cluster.sh:\n%s", out)
		}
	}
}
