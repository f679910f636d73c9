package node

import "sync"

// idLocks serialise the calls that make or unmake one sandbox's runtime
// (Create, BootFromDisk, ResumeFrom, Halt, Destroy). The control plane
// already runs one operation per sandbox at a time, but across processes a
// call can outlive its caller: a create sent by a control-plane replica
// that died is still booting when the replica that took the sandbox over
// halts it and starts it again. Without the lock the two interleave, and
// a destroy can run between the old boot's runtime start and its
// registration, leaving a runtime nothing owns.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu    sync.Mutex
	users int
}

// lock takes id's lock and returns its release.
func (l *idLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k := l.locks[id]
	if k == nil {
		k = &idLock{}
		l.locks[id] = k
	}
	k.users++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.users--; k.users == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}
