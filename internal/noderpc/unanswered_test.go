package noderpc

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/space-platform/space/internal/nodeapi"
	"github.com/space-platform/space/internal/nodeapi/nodeapitest"
)

// A node that went away (nothing listens at its address any more) answers
// every call with an error wrapping DialOptions.Unavailable, whose text
// names the node by Name and not by its address; a node's own refusal
// does not wrap it.
func TestUnansweredWrapsUnavailable(t *testing.T) {
	gone := errors.New("node unavailable")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := Dial("http://"+addr, testToken, DialOptions{Name: "node-7", Unavailable: gone})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_, err = c.Info(ctx)
	if !errors.Is(err, gone) {
		t.Fatalf("Info of a node that is gone: %v, want it to wrap the Unavailable error", err)
	}
	if msg := err.Error(); strings.Contains(msg, addr) || strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "node-7") {
		t.Fatalf("error %q: want the node's name and not its address", msg)
	}
	if err := c.Destroy(ctx, "sbx-1"); !errors.Is(err, gone) {
		t.Fatalf("Destroy on a node that is gone: %v", err)
	}

	// A node that answers: its refusal is its own.
	up, err := Dial(serve(t, nodeapitest.NewFake("node-8"), ServerOptions{}), testToken, DialOptions{Name: "node-8", Unavailable: gone})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	sb, err := up.Sandbox(ctx, "sbx-none")
	if err == nil {
		_, err = sb.Exec(ctx, nodeapi.ExecSpec{Cmd: []string{"true"}})
	}
	if err == nil || errors.Is(err, gone) || !errors.Is(err, nodeapi.ErrNoSandbox) {
		t.Fatalf("a refusal of a node that answers: %v, want ErrNoSandbox and not Unavailable", err)
	}
}
