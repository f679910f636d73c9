package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// userAccount is a user as read from the sandbox's /etc/passwd and
// /etc/group. The agent is static (no cgo, no NSS), so it parses the files
// itself.
type userAccount struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Shell  string
	Groups []uint32 // supplementary groups, primary GID included
}

var errUserNotFound = errors.New("user not found")

// rootAccount is used when the default user does not exist, e.g. in a bare
// image without /etc/passwd.
var rootAccount = userAccount{Name: "root", Home: "/root", Shell: "/bin/sh", Groups: []uint32{0}}

type passwdEntry struct {
	name        string
	uid, gid    uint32
	home, shell string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// userDB parses etc/passwd and etc/group under a root dir and re-reads them
// when they change, so users added by `useradd` inside the sandbox show up.
type userDB struct {
	passwdPath, groupPath string

	mu          sync.Mutex
	passwdStamp fileStamp
	groupStamp  fileStamp
	passwd      []passwdEntry
	groups      []groupEntry
	namesAt     time.Time // last refresh by a name lookup
}

type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func newUserDB(rootDir string) *userDB {
	return &userDB{
		passwdPath: filepath.Join(rootDir, "etc", "passwd"),
		groupPath:  filepath.Join(rootDir, "etc", "group"),
	}
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

// refresh re-parses files whose mtime or size changed. Callers hold db.mu.
func (db *userDB) refresh() {
	if st := stampOf(db.passwdPath); st != db.passwdStamp {
		db.passwdStamp = st
		db.passwd = parsePasswd(db.passwdPath)
	}
	if st := stampOf(db.groupPath); st != db.groupStamp {
		db.groupStamp = st
		db.groups = parseGroup(db.groupPath)
	}
}

func readColonFile(path string, minFields int, each func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return // a missing file just means no entries
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) >= minFields {
			each(fields)
		}
	}
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func parsePasswd(path string) []passwdEntry {
	var out []passwdEntry
	readColonFile(path, 7, func(f []string) {
		uid, ok1 := parseID(f[2])
		gid, ok2 := parseID(f[3])
		if ok1 && ok2 {
			out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5], shell: f[6]})
		}
	})
	return out
}

func parseGroup(path string) []groupEntry {
	var out []groupEntry
	readColonFile(path, 4, func(f []string) {
		gid, ok := parseID(f[2])
		if !ok {
			return
		}
		var members []string
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: f[0], gid: gid, members: members})
	})
	return out
}

// lookup returns the named user with its supplementary groups.
func (db *userDB) lookup(name string) (*userAccount, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refresh()
	for _, p := range db.passwd {
		if p.name != name {
			continue
		}
		u := &userAccount{Name: p.name, UID: p.uid, GID: p.gid, Home: p.home, Shell: p.shell, Groups: []uint32{p.gid}}
		for _, g := range db.groups {
			if g.gid != p.gid && containsString(g.members, name) {
				u.Groups = append(u.Groups, g.gid)
			}
		}
		return u, nil
	}
	if name == "root" {
		root := rootAccount
		return &root, nil
	}
	return nil, fmt.Errorf("%w: %q", errUserNotFound, name)
}

// nameRefreshEvery is how stale the names shown for owners may be. Looking
// names up refreshes at most this often: a listing names the owner of every
// entry, and two stat calls per entry (of /etc/passwd and /etc/group) made
// listings of large directories much slower under gVisor. Selecting a user
// (lookup) always re-reads.
const nameRefreshEvery = time.Second

func (db *userDB) refreshNames() {
	if now := time.Now(); now.Sub(db.namesAt) >= nameRefreshEvery {
		db.refresh()
		db.namesAt = now
	}
}

// userName and groupName map IDs to names for EntryInfo; unknown IDs are
// shown as numbers, like ls does.
func (db *userDB) userName(uid uint32) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refreshNames()
	for _, p := range db.passwd {
		if p.uid == uid {
			return p.name
		}
	}
	if uid == 0 {
		return "root"
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (db *userDB) groupName(gid uint32) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.refreshNames()
	for _, g := range db.groups {
		if g.gid == gid {
			return g.name
		}
	}
	if gid == 0 {
		return "root"
	}
	return strconv.FormatUint(uint64(gid), 10)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// resolveUser picks the account a request acts as: the explicitly named one
// (which must exist), else the configured default user, else root.
func (a *Agent) resolveUser(explicit string, hasExplicit bool) (*userAccount, error) {
	if hasExplicit {
		return a.users.lookup(explicit)
	}
	name, _ := a.settings.defaults()
	if name != "" {
		if u, err := a.users.lookup(name); err == nil {
			return u, nil
		}
	}
	return a.users.lookup("root")
}

// resolvePath makes p absolute: "~" and relative paths are relative to the
// user's home, as in envd.
func resolvePath(p string, u *userAccount) (string, error) {
	home := u.Home
	if home == "" {
		home = "/"
	}
	switch {
	case p == "" || p == "~":
		return filepath.Clean(home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:]), nil
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("path %q: ~user expansion is not supported", p)
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	default:
		return filepath.Join(home, p), nil
	}
}
