//go:build race

package e2e

// raceEnabled: the race detector's shadow memory inflates the process's RSS
// several times over what the Go heap holds.
const raceEnabled = true
