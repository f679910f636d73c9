// Package bench measures a live space server: how long sandboxes take to
// create, answer, move files, pause, suspend, snapshot and branch; how many
// creates per second it sustains; how many idle sandboxes fit on the node
// and what each costs in memory; and, for scale, what bare runsc takes to
// run and restore the same template without the platform around it.
//
// Run drives every measurement through the public API (pkg/client), except
// the host-side readings (cgroup accounting, /proc) and the runsc baselines,
// which need root on the server's machine and are marked absent otherwise.
// Everything it creates is deleted again, also when it is interrupted.
//
// `space bench` (internal/cli) is the command line front end; the
// definitions of the figures are in docs/performance.md.
package bench
