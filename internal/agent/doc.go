// Package agent is the in-sandbox daemon of space: a static binary that runs as
// PID 1 inside every gVisor sandbox and is wire-compatible with E2B's envd, so
// unmodified E2B SDKs can drive a sandbox.
//
// It serves, on one TCP port (49983 by default), over HTTP/1.1 and h2c:
//
//   - the Connect RPC services process.Process and filesystem.Filesystem
//     (JSON and binary codecs), generated from proto/;
//   - GET/POST /files for downloads and streamed, fsynced uploads;
//   - GET /list (a space extension) for one page of a directory listing as
//     JSON lines, read in bounded memory (see package dirlist);
//   - POST /init (re-keying and defaults), GET /envs, GET /metrics and
//     GET /health.
//
// File operations (uploads, downloads, make dir, move, remove) run with the
// permissions of the selected user, on a thread whose credentials are that
// user's (asuser.go); envd instead acts as root and chowns.
//
// As PID 1 it also reaps orphaned zombies and forwards termination signals to
// the process groups it started; see reaper.go and pid1.go.
//
// # Output offset extension (X-Space-Output-Offset)
//
// E2B's Connect RPC delivers only output produced after the client attached,
// so a dropped connection loses bytes. The node must not lose bytes, so the
// agent keeps, per process, a bounded ring (Config.OutputBufferBytes, 1 MiB by
// default) of its most recent output. Stdout, stderr and PTY output are counted
// as one byte sequence in order of arrival; the first byte a process ever
// writes has absolute offset 0.
//
// A Connect request that carries the header
//
//	X-Space-Output-Offset: <n>
//
// (n a non-negative decimal integer) first replays the held output from
// absolute offset n, then continues live. The response header
// X-Space-Output-Offset holds the absolute offset of the first byte the stream
// will deliver: n if it was still held, or the oldest held offset if the ring
// had already dropped some of it (so the client can detect a gap), or the
// current end if n lies beyond it. Data events are then delivered strictly in
// order without gaps, so a client tracks its position by adding up the
// lengths of the data payloads it receives. Start responses carry the same
// header with value 0.
//
// Without the header, Connect keeps envd semantics: output from the moment of
// attaching. Records of exited processes (exit status and ring) are kept for
// Config.ExitedRetention (5 minutes by default, at most
// Config.MaxExitedRetained of them), so a Connect after exit still receives
// the remaining output and the end event.
//
// A stream whose reader falls behind by more than the ring holds stalls the
// process's output (the process blocks on a full pipe) for at most
// Config.SlowReaderTimeout; after that the stream fails with data_loss and
// the process continues, so a stuck client can never wedge a process.
package agent
