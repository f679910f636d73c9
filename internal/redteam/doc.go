// Package redteam attacks a live space server from inside its own
// sandboxes: a catalog of scripted escape and bypass attempts
// (filesystem, process, kernel interface, network, DNS, credentials,
// resource exhaustion), a runner that plays them against an attacker
// sandbox while a victim and a bystander sandbox run beside it, and a
// verdict for each.
//
// A script's own report is never the only evidence. The runner plants
// canaries on the host (a file holding a random token, a listener on every
// host address, a sentinel process, the host kernel's boot id and version)
// and in the victim sandbox, and after every attempt checks from outside
// that none of them was read, reached, signalled or changed, that the
// victim is untouched and that the bystander still runs commands. It must
// therefore run on the server's host, as root, to check everything.
package redteam
