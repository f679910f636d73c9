package agent

import (
	"maps"
	"sync"
)

// settings is the mutable, sandbox-wide state that POST /init replaces: the
// access token and the defaults applied to every request.
type settings struct {
	mu             sync.RWMutex
	accessToken    string
	defaultUser    string
	defaultWorkdir string
	envVars        map[string]string
}

func newSettings(cfg Config) *settings {
	return &settings{
		accessToken:    cfg.AccessToken,
		defaultUser:    cfg.DefaultUser,
		defaultWorkdir: cfg.DefaultWorkdir,
		envVars:        map[string]string{},
	}
}

func (s *settings) token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accessToken
}

func (s *settings) defaults() (user, workdir string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.defaultUser, s.defaultWorkdir
}

func (s *settings) env() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.envVars)
}
