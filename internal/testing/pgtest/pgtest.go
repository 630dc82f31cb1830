//go:build linux

// Package pgtest starts a real PostgreSQL server for tests, from the
// server binaries of the machine (Debian's postgresql package:
// /usr/lib/postgresql/<version>/bin), in a temporary directory, on a free
// loopback port:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestStore(t *testing.T) {
//		dsn := pgtest.Start(t) // a fresh, empty database
//		...
//	}
//
// With Main, one server serves every test of the binary (each Start
// creates a new database on it, a few milliseconds) and Main stops it
// and removes its directory after the tests. Without Main, each Start
// starts a server of its own and stops it at the test's cleanup.
//
// The server is started as a child of the test process with
// `postgres -D ...` rather than `pg_ctl start`, which detaches it: the
// child gets SIGQUIT (PostgreSQL's immediate shutdown, what `pg_ctl stop
// -m immediate` sends) when the test process dies, so a test binary
// killed by `go test -timeout` leaves no server behind. Only 127.0.0.1
// is listened on (no unix socket: t.TempDir paths are too long for
// one), with a random password (scram-sha-256) since other users of the
// machine can reach the port; durability is off (fsync, full pages) —
// the cluster is thrown away. Its directory, which a killed test process
// cannot remove, is removed by the next Start on the machine.
//
// PostgreSQL refuses to run as root. Run as root (the CI and this
// project's machines), pgtest runs initdb and postgres as the `postgres`
// user the Debian package creates, or else as `nobody`, through the
// process credentials (no sudo or runuser needed); the directory, made
// under os.TempDir() (agrun-pg-*), is given to that user, so os.TempDir() must be
// reachable by it (/tmp is).
//
// If the binaries are missing the test is skipped with a message naming
// scripts/setup-cluster.sh, which installs them — unless
// AGRUN_REQUIRE_CLUSTER=1 (as .ci/run sets), where it fails. The binaries
// are looked for in $AGRUN_PG_BIN, then /usr/lib/postgresql/*/bin (the
// newest version), then $PATH.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	mu        sync.Mutex
	mainMode  bool    // Main is running the tests
	shared    *server // the server of Main mode, once started
	sharedErr error   // why it could not be started
	dbSeq     int
)

// Main runs the tests (m.Run) with one server for all of them, started
// by the first Start, and stops it after. Use it as
// `func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }`.
func Main(m *testing.M) int {
	mu.Lock()
	mainMode = true
	mu.Unlock()
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if err := shared.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		shared = nil
	}
	return code
}

// Start returns the DSN (a postgres:// URL) of a new, empty database on
// a running test server, starting the server if needed (see the package
// doc). It skips the test, or fails it under AGRUN_REQUIRE_CLUSTER=1,
// when PostgreSQL is not installed; any other failure fails the test.
func Start(t testing.TB) (dsn string) {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		if os.Getenv("AGRUN_REQUIRE_CLUSTER") == "1" {
			t.Fatalf("pgtest: %v (AGRUN_REQUIRE_CLUSTER=1)", err)
		}
		t.Skipf("pgtest: %v: run scripts/setup-cluster.sh to install it", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var srv *server
	if mainMode {
		if shared == nil && sharedErr == nil {
			shared, sharedErr = startServer(bin)
		}
		if sharedErr != nil {
			t.Fatalf("pgtest: %v", sharedErr)
		}
		srv = shared
	} else {
		if srv, err = startServer(bin); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		t.Cleanup(func() {
			if err := srv.stop(); err != nil {
				t.Errorf("pgtest: %v", err)
			}
		})
	}
	dbSeq++
	name := "t" + strconv.Itoa(dbSeq)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return srv.dsn(name)
}

// findBin returns the folder holding initdb and postgres.
func findBin() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("AGRUN_PG_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("PostgreSQL's server binaries (initdb, postgres) not in $AGRUN_PG_BIN (%s)", d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first (numeric: 9.6 < 15 < 17).
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(a)), 64)
		vb, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(b)), 64)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return 0
	})
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL's server binaries (initdb, postgres) not found in /usr/lib/postgresql/*/bin or $PATH")
}

// server is one running postgres child process.
type server struct {
	dir      string // owns data/, log, pwfile
	port     int
	password string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	log      *os.File
}

func (s *server) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", s.password, s.port, db)
}

// exec runs one statement on the maintenance database.
func (s *server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// account returns the credentials to run PostgreSQL with: none when not
// root, else the postgres user's or nobody's.
func account() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil && uid != 0 {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
		}
	}
	return nil, errors.New("running as root, and there is no postgres or nobody user to run PostgreSQL as (it refuses root)")
}

const (
	dirPattern = "agrun-pg-"
	ownerFile  = "owner.pid" // the pid of the test process that made the directory
)

// removeStale removes the directories of servers whose test process was
// killed (its server went with it, see the package doc, but not the
// directory). A directory whose owner is alive, or unknown, is kept.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// startServer makes a cluster in a new temporary directory and starts
// it, retrying on another port if the one picked was taken meanwhile.
func startServer(bin string) (*server, error) {
	cred, err := account()
	if err != nil {
		return nil, err
	}
	removeStale()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	var pw [16]byte
	_, _ = rand.Read(pw[:])
	s := &server{dir: dir, password: hex.EncodeToString(pw[:])}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{dir, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--pwfile="+pwfile, "-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.Env = pgEnv()
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.Remove(pwfile); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.run(bin, data, cred); lastErr == nil {
			ok = true
			return s, nil
		}
	}
	return nil, lastErr
}

// run starts postgres on a free port and waits until it accepts
// connections.
func (s *server) run(bin, data string, cred *syscall.Credential) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.port = port
	logPath := filepath.Join(s.dir, "log")
	if s.log, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(port), "-k", "",
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	cmd.Dir = s.dir
	cmd.Env = pgEnv()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		s.log.Close()
		return fmt.Errorf("postgres: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { s.waitErr = cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.exited:
			s.log.Close()
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited at start (%v):\n%s", s.waitErr, out)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.exec(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = s.stop()
			return fmt.Errorf("postgres did not accept connections within 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down at once (SIGQUIT, as pg_ctl stop -m
// immediate) and removes its directory.
func (s *server) stop() error {
	var err error
	if s.cmd != nil {
		select {
		case <-s.exited:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-s.exited:
			case <-time.After(15 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.exited
				err = errors.New("postgres did not stop within 15s of SIGQUIT; killed")
			}
		}
		s.log.Close()
	}
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// pgEnv is the environment of initdb and postgres: the process's, less
// the PG* variables that would point them elsewhere.
func pgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
