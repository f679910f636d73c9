// Package envdversion names the envd feature level the agent implements,
// in one place for the agent (which reports it on POST /init, as envd does)
// and the E2B API (which returns it as envdVersion, the value the SDKs gate
// features on). It is its own package so that the server need not link the
// agent to know it.
package envdversion

// Version is the envd version whose SDK-visible surface the agent
// implements in full. The SDKs compare it with compare-versions (JS) and
// packaging.Version (Python); what they unlock at each level:
//
//   - 0.1.4 recursive watches; 0.1.5 sandbox metrics; 0.2.4 disk metrics
//   - 0.3.0 commands without stdin; 0.4.0 the default user applied by envd
//   - 0.5.2 closeStdin; 0.5.7 application/octet-stream uploads
//   - 0.6.2 file metadata (X-Metadata-* upload headers, EntryInfo.metadata)
//   - 0.6.3 watch events with the entry (include_entry)
//   - 0.6.4 watches on network filesystems only when asked
//     (allow_network_mounts; refused otherwise)
//
// E2B's envd has moved on (0.6.13 at the reference commit), but no SDK
// gates anything past 0.6.4, and the later envd changes are internal to
// E2B's orchestrator; claiming them would promise behaviour that is not
// here.
const Version = "0.6.4"

// Header carries Version on the agent's answers, named as envd names it.
const Header = "X-Envd-Version"

// Build names the agent's build when the linker sets it (-ldflags "-X
// github.com/space-platform/space/internal/agent/envdversion.Build=..."):
// a sandbox restored from an image keeps the agent it was taken with, so
// after an upgrade two builds answer side by side, and BuildHeader on
// /health tells which one a sandbox runs.
var Build string

// BuildHeader carries Build on the agent's /health answers (a space
// addition; envd has none).
const BuildHeader = "X-Space-Agent-Build"
