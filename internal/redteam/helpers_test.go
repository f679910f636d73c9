package redteam

import (
	"io"
	"net"
	"strconv"
	"syscall"
	"time"
)

var (
	stopSignal = syscall.SIGSTOP
	contSignal = syscall.SIGCONT
)

func dialLocal(port int) (net.Conn, error) {
	return net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
}

func readAll(c net.Conn) (string, error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// waitBriefly lets the kernel update a stopped process's state; the test
// polls for it rather than asserting a duration.
func waitBriefly() { time.Sleep(20 * time.Millisecond) }
