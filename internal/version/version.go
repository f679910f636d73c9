// Package version holds space's version: the one source for the server
// (GET /healthz answers it) and for the SDKs in sdk/, whose copies
// (sdk/python/pyproject.toml, sdk/python/src/space_sandbox/_version.py,
// sdk/typescript/package.json, sdk/typescript/src/version.ts) this
// package's test keeps equal to it. To release, change Version here and
// run `go test ./internal/version/ -update` to rewrite the copies.
package version

// Version is the server's version, and the SDKs'.
const Version = "0.1.0"
