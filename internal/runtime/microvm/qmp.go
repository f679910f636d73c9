package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a client of QEMU's machine protocol on a unix socket: JSON
// commands with an id, answered by a "return" or an "error" with that id;
// asynchronous events are kept for whoever waits for them.
type qmp struct {
	conn *net.UnixConn
	wmu  sync.Mutex

	mu      sync.Mutex
	nextID  int
	pending map[string]chan qmpReply
	events  []qmpEvent
	evWake  chan struct{}
	err     error // set when the connection is gone
	done    chan struct{}
}

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	ID    string          `json:"id"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type qmpEvent struct {
	Name string
	Data json.RawMessage
}

// dialQMP connects to QEMU's QMP socket, retrying until ctx ends (QEMU
// creates the socket a moment after it starts), and leaves capability
// negotiation mode.
func dialQMP(ctx context.Context, path string) (*qmp, error) {
	var conn net.Conn
	var err error
	for {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", path)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("qmp: %w (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	q := &qmp{conn: conn.(*net.UnixConn), pending: map[string]chan qmpReply{}, evWake: make(chan struct{}), done: make(chan struct{})}
	br := bufio.NewReaderSize(conn, 64<<10)
	// The greeting comes first, before any command.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadBytes('\n'); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	go q.readLoop(br)
	if _, err := q.execute(ctx, "qmp_capabilities", nil); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) readLoop(br *bufio.Reader) {
	defer close(q.done)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			q.mu.Lock()
			q.err = fmt.Errorf("qmp connection: %w", err)
			for id, ch := range q.pending {
				close(ch)
				delete(q.pending, id)
			}
			close(q.evWake)
			q.mu.Unlock()
			return
		}
		var r qmpReply
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		q.mu.Lock()
		if r.Event != "" {
			q.events = append(q.events, qmpEvent{r.Event, r.Data})
			close(q.evWake)
			q.evWake = make(chan struct{})
		} else if ch, ok := q.pending[r.ID]; ok {
			delete(q.pending, r.ID)
			ch <- r
		}
		q.mu.Unlock()
	}
}

// execute runs one command and returns its "return" value.
func (q *qmp) execute(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return q.executeWithFD(ctx, cmd, args, -1)
}

// executeWithFD sends fd along with the command (SCM_RIGHTS), as getfd
// and add-fd expect.
func (q *qmp) executeWithFD(ctx context.Context, cmd string, args any, fd int) (json.RawMessage, error) {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return nil, err
	}
	q.nextID++
	id := fmt.Sprint(q.nextID)
	ch := make(chan qmpReply, 1)
	q.pending[id] = ch
	q.mu.Unlock()

	msg := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		msg["arguments"] = args
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	q.wmu.Lock()
	if fd >= 0 {
		_, _, err = q.conn.WriteMsgUnix(data, unix.UnixRights(fd), nil)
	} else {
		_, err = q.conn.Write(data)
	}
	q.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("qmp %s: %w", cmd, q.connErr())
		}
		if r.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, r.Error.Class, r.Error.Desc)
		}
		return r.Return, nil
	case <-ctx.Done():
		q.mu.Lock()
		delete(q.pending, id)
		q.mu.Unlock()
		return nil, fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	}
}

func (q *qmp) connErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		return errors.New("qmp connection closed")
	}
	return q.err
}

// waitEvent waits for an event named name that arrived after mark (an
// index from eventMark) and returns its data.
func (q *qmp) waitEvent(ctx context.Context, mark int, name string) (json.RawMessage, error) {
	for {
		q.mu.Lock()
		for i := mark; i < len(q.events); i++ {
			if q.events[i].Name == name {
				data := q.events[i].Data
				q.mu.Unlock()
				return data, nil
			}
		}
		mark = len(q.events)
		wake, err := q.evWake, q.err
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", name, ctx.Err())
		}
	}
}

func (q *qmp) eventMark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events)
}

// status returns the VM's run state ("running", "paused", ...).
func (q *qmp) status(ctx context.Context) (string, error) {
	raw, err := q.execute(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("query-status: %w", err)
	}
	return st.Status, nil
}

func (q *qmp) Close() error {
	err := q.conn.Close()
	<-q.done
	return err
}
