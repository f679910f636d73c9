package agent

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// asUser runs fn with the filesystem permissions of u: on an OS thread of
// its own whose effective uid, gid and groups are u's, so the kernel (gVisor)
// checks u's rights on every path fn touches and what fn creates belongs
// to u. Unlike envd, which writes as root and chowns afterwards, a write as
// user "user" into a root-owned 0755 directory is then refused (EACCES,
// answered 403).
//
// Only the calling thread's credentials change (raw system calls, not the
// all-threads wrappers of package syscall), and the thread never returns to
// the Go scheduler: the goroutine ends locked, so the runtime discards the
// thread. Threads the runtime starts meanwhile come from its template
// thread, never from this one.
func asUser(u *userAccount, fn func() error) error {
	if u.UID == 0 || os.Geteuid() != 0 {
		return fn() // root, or an agent that is not root (tests): nothing to drop
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, on purpose: see above
		if err := dropThreadCredentials(u); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func dropThreadCredentials(u *userAccount) error {
	groups := u.Groups
	if len(groups) == 0 {
		groups = []uint32{u.GID}
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("act as %s: setgroups: %w", u.Name, e)
	}
	keep := ^uintptr(0) // -1: leave this id as it is
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, uintptr(u.GID), keep); e != 0 {
		return fmt.Errorf("act as %s: setresgid: %w", u.Name, e)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, uintptr(u.UID), keep); e != 0 {
		return fmt.Errorf("act as %s: setresuid: %w", u.Name, e)
	}
	return nil
}
