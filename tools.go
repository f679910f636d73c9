//go:build tools

// Package tools pins dependencies the build uses before code imports them.
package tools

import (
	_ "connectrpc.com/connect"
	_ "github.com/creack/pty"
	_ "github.com/fsnotify/fsnotify"
	_ "go.etcd.io/bbolt"
	_ "golang.org/x/net/http2"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
)
