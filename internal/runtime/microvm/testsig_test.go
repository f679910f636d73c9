package microvm

import "syscall"

var sysSignal0 = syscall.Signal(0)
