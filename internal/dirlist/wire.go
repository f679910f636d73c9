package dirlist

import "encoding/json"

// Line is one line of the agent's paged listing answer (GET /list, one
// JSON object per line). Entry lines carry an entry (the protojson of a
// filesystem.EntryInfo); the last line has Done set and, if the directory
// holds more, NextCursor. A listing that fails after the answer began ends
// with Error instead, so a reader never takes a cut answer for a whole one.
type Line struct {
	Entry      json.RawMessage `json:"entry,omitempty"`
	NextCursor string          `json:"next_cursor,omitempty"`
	Done       bool            `json:"done,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// Bounds of a page.
const (
	DefaultLimit = 1000
	MaxLimit     = 10000
	MaxDepth     = 64
)
