package node

import "github.com/space-platform/space/internal/nodeapi"

// The data plane's values and errors are nodeapi's: a node answers with
// them in process and over RPC alike. These names keep the node's own code
// (and its callers that have not moved yet) reading as before.
type (
	ExecSpec    = nodeapi.ExecSpec
	ExecResult  = nodeapi.ExecResult
	SessionSpec = nodeapi.SessionSpec
	ListOptions = nodeapi.ListOptions
	AgentError  = nodeapi.AgentError
	Stream      = nodeapi.Stream
	Chunk       = nodeapi.Chunk
	End         = nodeapi.End
)

// MaxExecOutput bounds each stream a one-shot command keeps.
const MaxExecOutput = nodeapi.MaxExecOutput

// Output streams.
const (
	Stdout = nodeapi.Stdout
	Stderr = nodeapi.Stderr
	PTY    = nodeapi.PTY
)

// Errors the node answers with.
var (
	ErrNoSandbox   = nodeapi.ErrNoSandbox
	ErrNoSession   = nodeapi.ErrNoSession
	ErrExecTimeout = nodeapi.ErrExecTimeout
	ErrNoEgress    = nodeapi.ErrNoEgress
	// ErrTooManySessions: see Config.MaxSessions.
	ErrTooManySessions = nodeapi.ErrTooManySessions
)
