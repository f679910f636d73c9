package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/space-platform/space/internal/agent/gen/processpb"
)

func TestStartReportsOutputAndExitCodeOverEveryTransportAndCodec(t *testing.T) {
	env := newTestEnv(t)
	for _, o := range []clientOptions{
		{h2c: false, binary: false},
		{h2c: false, binary: true},
		{h2c: true, binary: false},
		{h2c: true, binary: true},
	} {
		t.Run(fmt.Sprintf("h2c=%v/binary=%v", o.h2c, o.binary), func(t *testing.T) {
			res := run(t, env.processClient(o), shell("echo hi; echo oops >&2; exit 3"))
			if res.pid == 0 {
				t.Error("start event has no pid")
			}
			if string(res.stdout) != "hi\n" || string(res.stderr) != "oops\n" {
				t.Errorf("stdout %q stderr %q", res.stdout, res.stderr)
			}
			if res.end.GetExitCode() != 3 || !res.end.GetExited() || res.end.GetStatus() != "exit status 3" {
				t.Errorf("end = %v", res.end)
			}
		})
	}
}

func TestStartSuccessHasZeroExitCode(t *testing.T) {
	env := newTestEnv(t)
	res := run(t, env.processClient(clientOptions{}), startRequest("echo", "plain", "argv"))
	if string(res.stdout) != "plain argv\n" {
		t.Errorf("stdout %q", res.stdout)
	}
	if res.end.GetExitCode() != 0 || res.end.GetStatus() != "exit status 0" || res.end.Error != nil {
		t.Errorf("end = %v", res.end)
	}
}

func TestStartRejectsUnknownCommandAndCwd(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{})
	for name, req := range map[string]*connect.Request[processpb.StartRequest]{
		"missing binary": startRequest("definitely-not-a-command-xyz"),
		"missing cwd": connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{
			Cmd: "/bin/true", Cwd: ptr("/no/such/dir")}}),
	} {
		stream, err := c.Start(context.Background(), req)
		if err == nil {
			_, err = collect(t, stream)
		}
		if connectCode(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: err = %v, want invalid_argument", name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestEnvPrecedenceAndCwd(t *testing.T) {
	env := newTestEnv(t)
	initAgent(t, env, testToken, map[string]any{"envVars": map[string]string{"FROM_INIT": "init", "OVERRIDE": "init"}})
	req := shell(`echo "$FROM_INIT $OVERRIDE $HOME $USER $PATH"; pwd`)
	req.Msg.Process.Envs = map[string]string{"OVERRIDE": "request"}
	req.Msg.Process.Cwd = ptr(env.dir)
	res := run(t, env.processClient(clientOptions{}), req)
	lines := strings.Split(strings.TrimSpace(string(res.stdout)), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q", res.stdout)
	}
	fields := strings.Fields(lines[0])
	if fields[0] != "init" || fields[1] != "request" || fields[2] != env.rootHome || fields[3] != "root" || fields[4] == "" {
		t.Errorf("env line %q", lines[0])
	}
	if lines[1] != env.dir {
		t.Errorf("cwd %q, want %q", lines[1], env.dir)
	}

	// Without cwd, the process starts in the user's home.
	res = run(t, env.processClient(clientOptions{}), shell("pwd"))
	if got := strings.TrimSpace(string(res.stdout)); got != env.rootHome {
		t.Errorf("default cwd %q, want %q", got, env.rootHome)
	}
}

func TestChildDoesNotInheritAgentToken(t *testing.T) {
	t.Setenv(tokenEnvVar, "from-env-secret")
	env := newTestEnv(t, func(c *Config) { c.AccessToken = "" })
	// The env var became the token ...
	res := run(t, env.processClient(clientOptions{token: "from-env-secret"}), shell(`echo "[$SPACE_AGENT_TOKEN]"`))
	// ... and children do not see it.
	if got := strings.TrimSpace(string(res.stdout)); got != "[]" {
		t.Errorf("child saw token: %q", got)
	}
}

func TestUserSelectionByBasicAuth(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{user: "tester"})
	res := run(t, c, shell(`id -u; id -G; echo "$HOME $USER"; pwd`))
	lines := strings.Split(strings.TrimSpace(string(res.stdout)), "\n")
	if len(lines) != 4 {
		t.Fatalf("output %q stderr %q", res.stdout, res.stderr)
	}
	if lines[0] != strconv.Itoa(testUID) {
		t.Errorf("uid %q", lines[0])
	}
	if !strings.Contains(" "+lines[1]+" ", " 4242 ") {
		t.Errorf("groups %q lack supplementary group 4242", lines[1])
	}
	if lines[2] != env.userHome+" tester" || lines[3] != env.userHome {
		t.Errorf("home/user %q cwd %q", lines[2], lines[3])
	}

	_, err := env.processClient(clientOptions{user: "nosuchuser"}).List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatalf("list does not need a user: %v", err)
	}
	stream, err := env.processClient(clientOptions{user: "nosuchuser"}).Start(context.Background(), shell("true"))
	if err == nil {
		_, err = collect(t, stream)
	}
	if connectCode(err) != connect.CodeUnauthenticated {
		t.Errorf("unknown user: %v", err)
	}
}

func TestDefaultUserFallsBackToRoot(t *testing.T) {
	env := newTestEnv(t, func(c *Config) { c.DefaultUser = "ghost" })
	res := run(t, env.processClient(clientOptions{}), shell("id -u"))
	if got := strings.TrimSpace(string(res.stdout)); got != "0" {
		t.Errorf("uid %q, want 0", got)
	}
}

func TestPTYRoundTripAndResize(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{h2c: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, res := startProcess(ctx, t, c, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-i"}, Envs: map[string]string{"PS1": "$ ", "TERM": "xterm"}},
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Cols: 80, Rows: 24}},
	}))
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: res.pid}}
	send := func(s string) {
		t.Helper()
		_, err := c.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
			Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Pty{Pty: []byte(s)}},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(want string) {
		t.Helper()
		for !bytes.Contains(res.pty, []byte(want)) {
			if !stream.Receive() {
				t.Fatalf("stream ended before %q: %v; pty %q", want, stream.Err(), res.pty)
			}
			recordEvent(t, res, stream.Msg().GetEvent())
		}
	}
	send("echo $((6*7))\n")
	waitFor("42")
	send("stty size\n")
	waitFor("24 80")
	if _, err := c.Update(ctx, connect.NewRequest(&processpb.UpdateRequest{
		Process: sel, Pty: &processpb.PTY{Size: &processpb.PTY_Size{Cols: 100, Rows: 50}},
	})); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	waitFor("50 100")
	send("exit 7\n")
	for res.end == nil && stream.Receive() {
		recordEvent(t, res, stream.Msg().GetEvent())
	}
	if res.end.GetExitCode() != 7 {
		t.Errorf("end %v, err %v", res.end, stream.Err())
	}
}

func TestStdinAndCloseStdin(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "cat"},
		Stdin:   ptr(true),
		Tag:     ptr("cat-stdin"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "cat-stdin"}}
	done := make(chan runResult)
	go func() {
		res, err := collect(t, stream)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	eventually(t, "process registered", func() bool { _, ok := env.agent.procs.byTag("cat-stdin"); return ok })
	if _, err := c.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: sel, Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("hello ")}},
	})); err != nil {
		t.Fatal(err)
	}
	// StreamInput delivers the rest in order.
	in := c.StreamInput(ctx)
	msgs := []*processpb.StreamInputRequest{
		{Event: &processpb.StreamInputRequest_Start{Start: &processpb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("streamed ")}}}}},
		{Event: &processpb.StreamInputRequest_Keepalive{Keepalive: &processpb.StreamInputRequest_KeepAlive{}}},
		{Event: &processpb.StreamInputRequest_Data{Data: &processpb.StreamInputRequest_DataEvent{Input: &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("world")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if string(res.stdout) != "hello streamed world" || res.end.GetExitCode() != 0 {
		t.Errorf("stdout %q end %v", res.stdout, res.end)
	}
}

func TestStdinFalseIsDevNull(t *testing.T) {
	env := newTestEnv(t)
	res := run(t, env.processClient(clientOptions{}), startRequest("cat"))
	if res.end.GetExitCode() != 0 || len(res.stdout) != 0 {
		t.Errorf("cat with stdin:false should see EOF at once: %v %q", res.end, res.stdout)
	}
}

func TestSendSignalTerminatesGroupAndUnknownIsNotFound(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, res := startProcess(ctx, t, c, shell("sleep 30; echo never"))
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: res.pid}}
	if _, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatal(err)
	}
	if err := collectInto(t, res, stream); err != nil {
		t.Fatal(err)
	}
	if res.end.GetStatus() != "signal: terminated" || res.end.GetExitCode() != -1 || res.end.GetExited() {
		t.Errorf("end %v", res.end)
	}
	_, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal_SIGNAL_SIGKILL}))
	if connectCode(err) != connect.CodeNotFound {
		t.Errorf("signal to exited process: %v", err)
	}

	// Any valid signal number is accepted as an extension.
	stream, err = c.Start(ctx, shell(`trap 'echo got-usr1; exit 0' USR1; echo ready; while :; do sleep 0.05; done`))
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	for !bytes.Contains(r.stdout, []byte("ready")) && stream.Receive() {
		recordEvent(t, &r, stream.Msg().GetEvent())
	}
	sel = &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: r.pid}}
	if _, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Process: sel, Signal: processpb.Signal(syscall.SIGUSR1)})); err != nil {
		t.Fatal(err)
	}
	for r.end == nil && stream.Receive() {
		recordEvent(t, &r, stream.Msg().GetEvent())
	}
	if !bytes.Contains(r.stdout, []byte("got-usr1")) || r.end.GetExitCode() != 0 {
		t.Errorf("usr1: stdout %q end %v err %v", r.stdout, r.end, stream.Err())
	}
}

func TestConnectByTagAndPIDSeesLaterOutputAndEnd(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{h2c: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := shell(`read line; echo "got $line"; exit 4`)
	req.Msg.Stdin = ptr(true)
	req.Msg.Tag = ptr("reader")
	start, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !start.Receive() {
		t.Fatal(start.Err())
	}
	var startRes runResult
	recordEvent(t, &startRes, start.Msg().GetEvent())
	pid := startRes.pid

	attach := func(sel *processpb.ProcessSelector) chan runResult {
		out := make(chan runResult, 1)
		stream, err := c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: sel}))
		if err != nil {
			t.Fatal(err)
		}
		// Wait for the start event so the attach happened before input.
		var r runResult
		if !stream.Receive() {
			t.Fatal(stream.Err())
		}
		recordEvent(t, &r, stream.Msg().GetEvent())
		go func() {
			for stream.Receive() {
				recordEvent(t, &r, stream.Msg().GetEvent())
			}
			out <- r
		}()
		return out
	}
	byTag := attach(&processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "reader"}})
	byPID := attach(&processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}})

	if _, err := c.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "reader"}},
		Input:   &processpb.ProcessInput{Input: &processpb.ProcessInput_Stdin{Stdin: []byte("x\n")}},
	})); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan runResult{"tag": byTag, "pid": byPID} {
		r := <-ch
		if r.pid != pid || string(r.stdout) != "got x\n" || r.end.GetExitCode() != 4 {
			t.Errorf("connect by %s: pid %d stdout %q end %v", name, r.pid, r.stdout, r.end)
		}
	}
	_ = collectInto(t, &startRes, start)

	_, err = c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "nope"}}}))
	if err == nil {
		stream, _ := c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "nope"}}}))
		stream.Receive()
		err = stream.Err()
	}
	if connectCode(err) != connect.CodeNotFound {
		t.Errorf("unknown tag: %v", err)
	}
}

// TestReattachWithOffsetLosesNoBytes drops the Start stream midway and
// resumes with X-Space-Output-Offset; the numbered lines must arrive exactly
// once and in order, across stdout and stderr.
func TestReattachWithOffsetLosesNoBytes(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{h2c: true, binary: true})
	const lines = 3000
	script := fmt.Sprintf(`i=1; while [ $i -le %d ]; do if [ $((i %% 7)) -eq 0 ]; then echo "line $i" >&2; else echo "line $i"; fi; if [ $((i %% 500)) -eq 0 ]; then sleep 0.1; fi; i=$((i+1)); done`, lines)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	req := shell(script)
	req.Msg.Tag = ptr("counter")
	stream, err := c.Start(first, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := stream.ResponseHeader().Get(outputOffsetHeader); got != "0" {
		t.Errorf("start offset header %q", got)
	}
	var r runResult
	for len(r.combined) < 4000 && stream.Receive() {
		recordEvent(t, &r, stream.Msg().GetEvent())
	}
	cancelFirst() // the connection to the node dropped
	received := append([]byte(nil), r.combined...)
	stdout, stderr := append([]byte(nil), r.stdout...), append([]byte(nil), r.stderr...)

	// Several partial re-attaches, each resuming at the byte count so far.
	for attempt := 0; ; attempt++ {
		creq := connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "counter"}}})
		creq.Header().Set(outputOffsetHeader, strconv.Itoa(len(received)))
		actx, acancel := context.WithCancel(ctx)
		cs, err := c.Connect(actx, creq)
		if err != nil {
			t.Fatal(err)
		}
		var part runResult
		limit := len(received) + 5000
		for cs.Receive() {
			recordEvent(t, &part, cs.Msg().GetEvent())
			if got := cs.ResponseHeader().Get(outputOffsetHeader); got != strconv.Itoa(len(received)) {
				t.Fatalf("attempt %d: replay offset header %q, want %d", attempt, got, len(received))
			}
			if part.end != nil || (attempt < 3 && len(received)+len(part.combined) >= limit) {
				break
			}
		}
		acancel()
		received = append(received, part.combined...)
		stdout, stderr = append(stdout, part.stdout...), append(stderr, part.stderr...)
		if part.end != nil {
			if part.end.GetExitCode() != 0 {
				t.Errorf("end %v", part.end)
			}
			break
		}
		if attempt > 50 {
			t.Fatal("never reached the end")
		}
	}
	// Order across stdout and stderr is arrival order (separate pipes), so
	// compare each stream on its own.
	var wantOut, wantErr strings.Builder
	for i := 1; i <= lines; i++ {
		if i%7 == 0 {
			fmt.Fprintf(&wantErr, "line %d\n", i)
		} else {
			fmt.Fprintf(&wantOut, "line %d\n", i)
		}
	}
	for name, pair := range map[string][2]string{"stdout": {string(stdout), wantOut.String()}, "stderr": {string(stderr), wantErr.String()}} {
		if pair[0] != pair[1] {
			got := strings.Split(pair[0], "\n")
			t.Errorf("reassembled %s differs: got %d lines, want %d; first lines %q", name, len(got)-1, strings.Count(pair[1], "\n"), got[:min(5, len(got))])
		}
	}

	// A Connect after exit still replays from an offset and gets the end.
	creq := connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "counter"}}})
	creq.Header().Set(outputOffsetHeader, strconv.Itoa(len(received)-8))
	cs, err := c.Connect(ctx, creq)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := collect(t, cs)
	if err != nil || string(tail.combined) != string(received[len(received)-8:]) || tail.end == nil {
		t.Errorf("post-exit replay %q end %v err %v", tail.combined, tail.end, err)
	}
	// Without the header, a Connect after exit gets start and end only.
	cs, err = c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "counter"}}}))
	if err != nil {
		t.Fatal(err)
	}
	tail, err = collect(t, cs)
	if err != nil || strings.Join(tail.order, ",") != "start,end" {
		t.Errorf("post-exit connect order %v err %v", tail.order, err)
	}
}

func TestConnectTimeoutBoundsProcessLifetime(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	req := shell("sleep 30")
	req.Msg.Tag = ptr("doomed")
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := collect(t, stream)
	if connectCode(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("err = %v, want deadline_exceeded", err)
	}
	if res.pid == 0 {
		t.Fatal("no start event")
	}
	p, ok := env.agent.procs.byTag("doomed")
	if !ok {
		t.Fatal("process record missing")
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("process outlived its Connect-Timeout-Ms")
	}
	if p.end.status != "signal: killed" {
		t.Errorf("status %q", p.end.status)
	}
}

func TestProcessOutlivesDisconnectedStream(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{h2c: true})
	ctx, cancel := context.WithCancel(context.Background())
	req := shell("sleep 0.5; echo survived")
	req.Msg.Tag = ptr("survivor")
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	cancel()
	p, _ := env.agent.procs.byTag("survivor")
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("process did not finish")
	}
	if p.end.exitCode != 0 || p.end.status != "exit status 0" {
		t.Errorf("process was disturbed by the disconnect: %+v", p.end)
	}
	creq := connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: "survivor"}}})
	creq.Header().Set(outputOffsetHeader, "0")
	cs, err := c.Connect(context.Background(), creq)
	if err != nil {
		t.Fatal(err)
	}
	res, err := collect(t, cs)
	if err != nil || string(res.stdout) != "survived\n" {
		t.Errorf("replay %q err %v", res.stdout, err)
	}
}

func TestKeepaliveEventsOnIdleStream(t *testing.T) {
	env := newTestEnv(t)
	req := shell("sleep 2.5; echo done")
	req.Header().Set(keepaliveHeader, "1")
	res := run(t, env.processClient(clientOptions{}), req)
	if res.keepalives < 1 {
		t.Errorf("no keepalive in %v", res.order)
	}
	if string(res.stdout) != "done\n" {
		t.Errorf("stdout %q", res.stdout)
	}
}

func TestListShowsRunningProcesses(t *testing.T) {
	env := newTestEnv(t)
	c := env.processClient(clientOptions{binary: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := shell("sleep 30")
	req.Msg.Tag = ptr("listed")
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	list, err := c.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid && p.GetTag() == "listed" && p.GetConfig().GetCmd() == "/bin/sh" {
			found = true
		}
	}
	if !found {
		t.Errorf("pid %d not listed: %v", pid, list.Msg)
	}
	if _, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}, Signal: processpb.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "process gone from list", func() bool {
		list, err := c.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		return err == nil && len(list.Msg.GetProcesses()) == 0
	})
}

// A process that writes large blocks has them delivered in large events:
// each read of its output is a trip through gVisor, so the agent reads up
// to a megabyte at a time from a megabyte pipe instead of 32 KiB from the
// default 64 KiB one.
func TestLargeWritesArriveInLargeEvents(t *testing.T) {
	env := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := env.processClient(clientOptions{h2c: true, binary: true}).Start(ctx, shell("dd if=/dev/zero bs=1M count=16 2>/dev/null"))
	if err != nil {
		t.Fatal(err)
	}
	var total, largest int
	for stream.Receive() {
		if out := stream.Msg().GetEvent().GetData().GetStdout(); out != nil {
			total += len(out)
			largest = max(largest, len(out))
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if total != 16<<20 || largest < 512<<10 {
		t.Fatalf("%d bytes in events of at most %d bytes; want 16 MiB with some events of ≥ 512 KiB", total, largest)
	}
}

// A command that leaves a background child holding its output open still
// ends: the agent stops reading once the command exited and the drain
// grace passed, rather than waiting for the child (an E2B exec of
// "(loop &)" did, until its timeout).
func TestBackgroundChildDoesNotHoldTheEnd(t *testing.T) {
	env := newTestEnv(t)
	start := time.Now()
	res := run(t, env.processClient(clientOptions{h2c: true, binary: true}), shell("(sleep 30 &); echo started"))
	if string(res.stdout) != "started\n" || res.end.GetExitCode() != 0 {
		t.Fatalf("stdout %q, end %v", res.stdout, res.end)
	}
	if took := time.Since(start); took > outputDrainGrace+10*time.Second {
		t.Fatalf("the stream ended %s after the start: the background child held it", took)
	}
}

// The agent started with its token in the environment re-executes itself
// with the token on a pipe: its own /proc/self/environ (what other
// processes of its user read as /proc/1/environ) no longer holds the
// token, and the token is still the one it answers to.
func TestInitialTokenLeavesTheEnvironment(t *testing.T) {
	const marker = "hide-me-"
	if os.Getenv("SPACE_TEST_HIDE_TOKEN") == "1" {
		// The helper: the test binary run again, then re-executed. It
		// says what it found, never the environment itself.
		if err := HideInitialToken(); err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		tok, ok, err := initialToken()
		environ, rerr := os.ReadFile("/proc/self/environ")
		fmt.Printf("token=%s ok=%v err=%v\nenviron read=%v shows token=%v shows descriptor=%v\n", tok, ok, err,
			rerr == nil, strings.Contains(string(environ), marker), strings.Contains(string(environ), tokenFDEnvVar+"="))
		os.Exit(0)
	}
	secret := marker + strings.Repeat("7", 40)
	cmd := exec.Command(os.Args[0], "-test.run=^TestInitialTokenLeavesTheEnvironment$")
	cmd.Env = append(os.Environ(), "SPACE_TEST_HIDE_TOKEN=1", tokenEnvVar+"="+secret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "token="+secret+" ok=true err=<nil>") {
		t.Fatalf("the re-executed agent lost its token:\n%s", out)
	}
	if !strings.Contains(string(out), "environ read=true shows token=false shows descriptor=true") {
		t.Fatalf("the token is still in the environment the kernel shows, or the agent was not re-executed:\n%s", out)
	}
}
