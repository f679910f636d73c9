// Package pgtest runs a private PostgreSQL cluster for tests: one per test
// binary, in a temporary directory, on a free loopback port, never the
// system's instance. Each test gets a database of its own.
//
// A package that uses it declares
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// so that the cluster is stopped and its directory removed after the last
// test. PostgreSQL must be installed (scripts/install-deps.sh installs it);
// without it a test that needs it fails rather than skips.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// serviceUser is the unprivileged account the cluster runs as when tests
// run as root (initdb and postgres refuse to run as root).
const serviceUser = "space-pg"

var (
	mainRan atomic.Bool
	once    sync.Once
	shared  *cluster
	err0    error
	dbSeq   atomic.Int64
)

// Main runs the package's tests, then stops the cluster if one was
// started. It returns m.Run's exit code.
func Main(m *testing.M) int {
	mainRan.Store(true)
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	return code
}

// Start returns the URL of a new, empty database on the binary's cluster,
// starting the cluster on first use; the database is dropped when the test
// ends.
func Start(t testing.TB) string {
	t.Helper()
	if !mainRan.Load() {
		t.Fatal("pgtest: the package must declare func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) } so that the PostgreSQL cluster is stopped after its tests")
	}
	once.Do(func() { shared, err0 = start() })
	if err0 != nil {
		t.Fatalf("pgtest: %v", err0)
	}
	name := fmt.Sprintf("test_%d", dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shared.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends sessions a test left open.
		if err := shared.exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return shared.url(name)
}

type cluster struct {
	dir    string
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func (c *cluster) url(db string) string {
	return fmt.Sprintf("postgres://space@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func (c *cluster) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// installed is where Debian's PostgreSQL packages put initdb.
const installed = "/usr/lib/postgresql/*/bin/initdb"

// binDir finds the newest <version>/bin with initdb that pattern matches.
func binDir(pattern string) (string, error) {
	found, _ := filepath.Glob(pattern)
	if len(found) == 0 {
		return "", fmt.Errorf("PostgreSQL is not installed (no %s): run scripts/install-deps.sh, which installs it as CI does", pattern)
	}
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	return filepath.Dir(found[0]), nil
}

// account returns the credentials to run PostgreSQL with: none (this
// process's) when not root, else the service user's, created if missing.
func account() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	// Test binaries of several packages start at once: another may be
	// adding the user (useradd then fails, on the lock or the name).
	var u *user.User
	for attempt := 0; ; attempt++ {
		var err error
		if u, err = user.Lookup(serviceUser); err == nil {
			break
		}
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", serviceUser).CombinedOutput()
		if err != nil && attempt == 10 {
			return nil, fmt.Errorf("create user %s: %v: %s", serviceUser, err, out)
		}
		if err != nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func start() (*cluster, error) {
	bin, err := binDir(installed)
	if err != nil {
		return nil, err
	}
	cred, err := account()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "space-pgtest-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, log: filepath.Join(dir, "postgres.log")}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "space", "--auth=trust",
		"--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	// A port another process takes between our probe and postgres's
	// bind makes postgres exit; then another port is tried.
	for attempt := 0; ; attempt++ {
		err := c.run(bin, data, cred)
		if err == nil {
			return c, nil
		}
		if attempt == 2 {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// run starts postgres itself (not pg_ctl, which detaches it) as a child
// that gets SIGQUIT when this process dies, so that a test binary killed
// midway leaves no server behind.
func (c *cluster) run(bin, data string, cred *syscall.Credential) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	if cred != nil {
		os.Chown(c.log, int(cred.Uid), int(cred.Gid))
	}
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(c.port),
		"-c", "unix_socket_directories="+c.dir,
		// Tests need no crash safety of the host's disk; they need speed.
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB", "-c", "max_connections=200")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Dir = c.dir
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	started := make(chan error, 1)
	c.exited = make(chan struct{})
	// Pdeathsig follows the thread that forked the child: that thread must
	// live as long as the process, so this goroutine keeps it locked and
	// never returns.
	go func() {
		runtime.LockOSThread()
		err := c.cmd.Start()
		started <- err
		if err == nil {
			c.cmd.Wait()
			close(c.exited)
		}
		select {}
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.exec(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.exited:
			out, _ := os.ReadFile(c.log)
			return fmt.Errorf("postgres exited at start: %s", strings.TrimSpace(string(out)))
		default:
		}
		if time.Now().After(deadline) {
			c.stop()
			return fmt.Errorf("postgres did not accept connections within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down fast (SIGINT) and removes its directory.
func (c *cluster) stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
	os.RemoveAll(c.dir)
}
