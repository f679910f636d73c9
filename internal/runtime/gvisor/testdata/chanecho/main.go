// Command chanecho is the in-sandbox end of BenchmarkAgentChannel: the
// cheapest program that answers the node over each candidate agent channel,
// so the benchmark measures the path and not the tool.
//
// Over TCP it listens like the agent does (gVisor's netstack): raw bytes on
// the agent's port, HTTP/2 (h2c) on the next one. Over host unix sockets
// (runsc --host-uds=open) it dials the two sockets the host listens on in
// $CHANECHO_DIR and then serves on what it dialed (roles inverted after
// connect, as the planned channel does): raw.sock raw, h2.sock HTTP/2.
//
// The raw protocol: the node sends 'e' and a 64-byte message, answered with
// the message; or 's' and a big-endian uint64 n, answered with n bytes. Over
// HTTP/2, POST /echo answers its body and GET /stream?n= answers n bytes.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

// The wire constants the benchmark shares (it cannot import a main package).
const (
	echoSize  = 64
	chunkSize = 1 << 20 // what the agent writes at once (a frame of the node's)
	rawPort   = 49983   // the agent's port: the TCP path the node dials today
	h2Port    = 49984
)

func main() {
	dir := os.Getenv("CHANECHO_DIR")
	// On the host (the benchmark's floor without gVisor) the agent's
	// ports may be taken; only the sockets are wanted there.
	if os.Getenv("CHANECHO_NO_TCP") == "" {
		go listenTCP(rawPort, serveRaw)
		go listenTCP(h2Port, serveH2)
	}
	if dir != "" {
		go dialUnix(filepath.Join(dir, "raw.sock"), serveRaw)
		go dialUnix(filepath.Join(dir, "h2.sock"), serveH2)
	}
	select {}
}

func listenTCP(port int, serve func(net.Conn)) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		log.Fatalf("chanecho: %v", err)
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Fatalf("chanecho: accept: %v", err)
		}
		go serve(conn)
	}
}

// dialUnix dials the host's socket until it answers, serves the
// connection, and dials again when the host closes it.
func dialUnix(path string, serve func(net.Conn)) {
	for {
		conn, err := net.Dial("unix", path)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		serve(conn)
	}
}

func serveRaw(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	buf := make([]byte, chunkSize)
	for {
		op, err := r.ReadByte()
		if err != nil {
			return
		}
		switch op {
		case 'e':
			if _, err := io.ReadFull(r, buf[:echoSize]); err != nil {
				return
			}
			if _, err := conn.Write(buf[:echoSize]); err != nil {
				return
			}
		case 's':
			var size [8]byte
			if _, err := io.ReadFull(r, size[:]); err != nil {
				return
			}
			if err := stream(conn, buf, binary.BigEndian.Uint64(size[:])); err != nil {
				return
			}
		default:
			fmt.Fprintf(os.Stderr, "chanecho: unknown op %q\n", op)
			return
		}
	}
}

func serveH2(conn net.Conn) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseUint(r.URL.Query().Get("n"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = stream(w, make([]byte, chunkSize), n)
	})
	new(http2.Server).ServeConn(conn, &http2.ServeConnOpts{Handler: mux})
}

// stream writes n bytes in chunks of the agent's size.
func stream(w io.Writer, buf []byte, n uint64) error {
	for n > 0 {
		chunk := buf[:min(n, uint64(len(buf)))]
		if _, err := w.Write(chunk); err != nil {
			return err
		}
		n -= uint64(len(chunk))
	}
	return nil
}
