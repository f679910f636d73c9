// Command pause is the process of a Kubernetes pod sandbox: it holds the
// pod's namespaces open, reaps the zombies re-parented to it (it is PID 1
// of the pod when the PID namespace is shared) and exits on SIGTERM or
// SIGINT. It is built here because registry.k8s.io cannot be reached.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", s)
			os.Exit(0)
		}
		// Reap every child that has exited; one SIGCHLD may stand for many.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
