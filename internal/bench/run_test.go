package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/space-platform/space/pkg/apiv1"
	"github.com/space-platform/space/pkg/client"
)

// fakeServer is just enough of the API for Run: sandboxes start at once, a
// warm pool refills at once, and it records what is left behind.
type fakeServer struct {
	withPool bool
	// runtimes the template was built for (none: gVisor only).
	runtimes []string

	mu        sync.Mutex
	asked     map[string]int // creates by the runtime they asked for
	poolSize  int
	sizes     []int // every size the pool was set to
	sandboxes map[string]*apiv1.Sandbox
	snapshots map[string]bool
	files     map[string][]byte
	nextID    int
	creates   int
	// onCreate runs (unlocked) after every create, for tests to interfere.
	onCreate func(n int)

	// inside is how the fake's sandboxes answer the floors' timed
	// scripts and sessions (fakeinside_test.go).
	inside fakeInside
	// claimMetric serves space_pool_claim_seconds; claims and claimSum
	// count the pooled creates (memory_mb 0 with a pool) and a fixed
	// fakeClaim each.
	claimMetric bool
	claims      int
	claimSum    float64
	sessions    map[string]fakeSession
}

func newFakeServer(withPool bool, poolSize int) *fakeServer {
	return &fakeServer{withPool: withPool, poolSize: poolSize, sandboxes: map[string]*apiv1.Sandbox{},
		snapshots: map[string]bool{}, files: map[string][]byte{}, claimMetric: true, sessions: map[string]fakeSession{}}
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/templates/{name}", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, http.StatusOK, f.template(r.PathValue("name")))
	})
	if f.withPool {
		mux.HandleFunc("PUT /v1/templates/{name}/pool", func(w http.ResponseWriter, r *http.Request) {
			var body apiv1.SetPoolRequest
			_ = json.NewDecoder(r.Body).Decode(&body)
			f.mu.Lock()
			f.poolSize = body.Size
			f.sizes = append(f.sizes, body.Size)
			f.mu.Unlock()
			writeTestJSON(w, http.StatusOK, f.template(r.PathValue("name")))
		})
	}
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.CreateSandboxRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		sb := f.add(apiv1.StateStarting, req.Metadata)
		f.mu.Lock()
		if f.asked == nil {
			f.asked = map[string]int{}
		}
		f.asked[req.Runtime]++
		f.creates++
		if f.withPool && f.poolSize > 0 && req.MemoryMB == 0 && req.Runtime == "" {
			f.claims++
			f.claimSum += fakeClaim.Seconds()
		}
		n, hook := f.creates, f.onCreate
		f.mu.Unlock()
		if hook != nil {
			hook(n)
		}
		writeTestJSON(w, http.StatusAccepted, sb)
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := apiv1.SandboxList{Sandboxes: []apiv1.Sandbox{}}
		for _, sb := range f.sandboxes {
			if sb.Metadata[benchMetadataKey] == r.URL.Query().Get("metadata."+benchMetadataKey) {
				list.Sandboxes = append(list.Sandboxes, *sb)
			}
		}
		writeTestJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/wait", func(w http.ResponseWriter, r *http.Request) {
		f.withSandbox(w, r, func(sb *apiv1.Sandbox) {
			if sb.State == apiv1.StateStarting {
				sb.State = apiv1.StateRunning
			}
		})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.sandboxes[r.PathValue("id")]; !ok {
			writeTestJSON(w, http.StatusNotFound, apiv1.Error{Code: 404, Message: "no such sandbox"})
			return
		}
		delete(f.sandboxes, r.PathValue("id"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.ExecRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !f.exists(r.PathValue("id")) {
			writeTestJSON(w, http.StatusNotFound, apiv1.Error{Code: 404, Message: "no such sandbox"})
			return
		}
		writeTestJSON(w, http.StatusOK, f.execIn(req.Cmd))
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/sessions", f.createSession)
	mux.HandleFunc("GET /v1/sandboxes/{id}/sessions/{sid}/attach", f.attach)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.claimMetric {
			fmt.Fprintf(w, "space_pool_claim_seconds_sum %g\nspace_pool_claim_seconds_count %d\n", f.claimSum, f.claims)
		}
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.files[r.PathValue("id")+r.URL.Query().Get("path")] = data
		f.mu.Unlock()
		writeTestJSON(w, http.StatusOK, apiv1.FileEntry{Name: "f", Size: int64(len(data))})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		key := r.PathValue("id") + r.URL.Query().Get("path")
		data, isFile := f.files[key]
		var list apiv1.FileList
		for name, content := range f.files {
			if strings.HasPrefix(name, key+"/") {
				list.Entries = append(list.Entries, apiv1.FileEntry{Name: name[len(key)+1:], Type: "file", Size: int64(len(content))})
			}
		}
		f.mu.Unlock()
		if !isFile && len(list.Entries) > 0 {
			writeTestJSON(w, http.StatusOK, list)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(data)
	})
	for action, state := range map[string]string{"pause": apiv1.StatePaused, "resume": apiv1.StateRunning, "suspend": apiv1.StateSuspended} {
		mux.HandleFunc("POST /v1/sandboxes/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			f.withSandbox(w, r, func(sb *apiv1.Sandbox) { sb.State = state })
		})
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.CreateSnapshotRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.snapshots[r.PathValue("id")+"/"+req.Name] = true
		f.mu.Unlock()
		writeTestJSON(w, http.StatusCreated, apiv1.Snapshot{Name: req.Name, SandboxID: r.PathValue("id")})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/snapshots/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		delete(f.snapshots, r.PathValue("id")+"/"+r.PathValue("name"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/branch", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		src := f.sandboxes[r.PathValue("id")]
		f.mu.Unlock()
		branch := f.add(apiv1.StateStarting, src.Metadata)
		writeTestJSON(w, http.StatusCreated, apiv1.BranchResult{Sandboxes: []apiv1.Sandbox{*branch}})
	})
	return mux
}

// template is the template record, with a pool that is always full.
func (f *fakeServer) template(name string) apiv1.Template {
	f.mu.Lock()
	defer f.mu.Unlock()
	tpl := apiv1.Template{Name: name, ID: "tpl123", State: apiv1.TemplateReady}
	tpl.SetRuntimes(f.runtimes)
	if f.withPool {
		tpl.Pool = &apiv1.PoolStatus{Size: f.poolSize, Ready: f.poolSize}
	}
	return tpl
}

func (f *fakeServer) add(state string, metadata map[string]string) *apiv1.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	sb := &apiv1.Sandbox{ID: fmt.Sprintf("sb%03d", f.nextID), State: state, Metadata: metadata}
	f.sandboxes[sb.ID] = sb
	copy := *sb
	return &copy
}

func (f *fakeServer) exists(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.sandboxes[id]
	return ok
}

// withSandbox applies change to the sandbox and answers with it.
func (f *fakeServer) withSandbox(w http.ResponseWriter, r *http.Request, change func(*apiv1.Sandbox)) {
	f.mu.Lock()
	sb, ok := f.sandboxes[r.PathValue("id")]
	if ok && change != nil {
		change(sb)
	}
	var copy apiv1.Sandbox
	if ok {
		copy = *sb
	}
	f.mu.Unlock()
	if !ok {
		writeTestJSON(w, http.StatusNotFound, apiv1.Error{Code: 404, Message: "no such sandbox"})
		return
	}
	writeTestJSON(w, http.StatusOK, copy)
}

func (f *fakeServer) leftovers() (sandboxes, snapshots int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sandboxes), len(f.snapshots)
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fakeConfig points a Config at f, skipping what needs a real host.
func fakeConfig(t *testing.T, f *fakeServer) Config {
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	skip, err := ParseSkip("throughput,churn,density,baselines")
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Client:    client.New(srv.URL, "key"),
		Template:  "minimal",
		Samples:   3,
		Skip:      skip,
		FillMiB:   -1,
		AttachMiB: 1,
	}
}

func TestRunWithPoolMeasuresBothCreatesAndRestoresThePool(t *testing.T) {
	f := newFakeServer(true, 2)
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, l := range res.Latencies() {
		isBaseline := l.Key == KeyBaselineRunscRun || l.Key == KeyBaselineRunscRestore
		if isBaseline != (l.Summary == nil) {
			t.Errorf("%s = %+v (note %q)", l.Key, l.Summary, res.Notes[l.Key])
		}
		if l.Summary != nil && l.Summary.N != 3 {
			t.Errorf("%s has %d samples, want 3", l.Key, l.Summary.N)
		}
	}
	if res.Notes[KeyBaselineRunscRun] != "skipped" || res.Notes[KeyDensity] != "skipped" {
		t.Errorf("notes = %v, want skipped measurements noted", res.Notes)
	}
	if !res.Template.PoolAPI || res.Template.ID != "tpl123" {
		t.Errorf("template = %+v", res.Template)
	}
	// Unpooled empties the pool, pooled and first exec grow it to 4; each
	// puts back 2.
	if want := []int{0, 2, 4, 2, 4, 2}; fmt.Sprint(f.sizes) != fmt.Sprint(want) {
		t.Errorf("pool sizes set = %v, want %v", f.sizes, want)
	}
	if sbs, snaps := f.leftovers(); sbs != 0 || snaps != 0 {
		t.Errorf("left behind %d sandboxes and %d snapshots", sbs, snaps)
	}
	if res.Lifecycle == nil || res.Lifecycle.MemoryMB != DefaultMemoryMB || res.Lifecycle.FillMiB != DefaultFillMiB(DefaultMemoryMB) {
		t.Errorf("lifecycle sandbox = %+v", res.Lifecycle)
	}
	// The floors, as the fake's clocks report them: a claim takes
	// fakeClaim, a timed body fakeBody (spawnLoop spawns of /bin/true, one
	// dd copy, 1 MiB piped).
	for key, want := range map[string]float64{
		KeyFloorCreatePooled: ms(fakeClaim),
		KeyFloorExecRTT:      ms(fakeBody / spawnLoop),
		KeyFloorFile1MiB:     ms(fakeBody),
	} {
		if s := res.latency(key); s == nil || s.P50MS != want {
			t.Errorf("%s = %+v, want p50 %v ms (note %q)", key, s, want, res.Notes[key])
		}
		if !strings.Contains(res.Notes[key], "ts -i") && key != KeyFloorCreatePooled {
			t.Errorf("note of %s = %q; want it to say how it was timed", key, res.Notes[key])
		}
	}
	if a := res.AttachStream; a == nil || a.MBPerS <= 0 || a.DroppedBytes != 0 || a.FloorMBPerS == nil || *a.FloorMBPerS != mbPerS(1<<20, fakeBody) {
		t.Errorf("attach_stream = %+v; want a rate, nothing dropped, and the floor 1 MiB in %s", a, fakeBody)
	}
	for _, k := range []string{"create_pooled/floor_create_pooled", "exec_rtt/floor_exec_rtt", "file_1mib/floor_file_1mib", "attach_stream/floor_attach_stream"} {
		if res.Ratios[k] <= 0 {
			t.Errorf("no ratio %s in %v", k, res.Ratios)
		}
	}
}

func ms(d time.Duration) float64 { return millis(d) }

func TestRunWithoutPoolAPIMarksPooledAbsent(t *testing.T) {
	f := newFakeServer(false, 0)
	res, err := Run(context.Background(), fakeConfig(t, f))
	if err != nil {
		t.Fatalf("Run: %v (an absent pool API is not a failure)", err)
	}
	if res.CreatePooled != nil || !strings.HasPrefix(res.Notes[KeyCreatePooled], "absent: ") {
		t.Errorf("create_pooled = %+v, note %q", res.CreatePooled, res.Notes[KeyCreatePooled])
	}
	if res.CreateUnpooled == nil {
		t.Errorf("create_unpooled not measured: %q", res.Notes[KeyCreateUnpooled])
	}
	if res.Template.PoolAPI {
		t.Error("template reports a pool API")
	}
}

func TestRunCleansUpWhenInterrupted(t *testing.T) {
	f := newFakeServer(true, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupt during create_pooled, with the pool grown and a sandbox live.
	f.onCreate = func(n int) {
		if n == 5 {
			cancel()
		}
	}
	_, err := Run(ctx, fakeConfig(t, f))
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run = %v, want interrupted", err)
	}
	if sbs, snaps := f.leftovers(); sbs != 0 || snaps != 0 {
		t.Errorf("left behind %d sandboxes and %d snapshots", sbs, snaps)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.poolSize != 1 {
		t.Errorf("pool size = %d after the interruption, want the original 1 (sizes set: %v)", f.poolSize, f.sizes)
	}
}

// With --runtime microvm every create names the runtime, the template's
// pool (of its default runtime, gVisor here) is no figure of microvm's,
// the lifecycle sandbox is a 128 MiB guest, and QEMU's floors replace
// runsc's; a template without the runtime is refused before anything runs.
func TestRunOnMicroVM(t *testing.T) {
	f := newFakeServer(true, 2)
	f.runtimes = []string{"gvisor", "microvm"}
	cfg := fakeConfig(t, f)
	cfg.Runtime = "microvm"
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f.asked["microvm"] == 0 || len(f.asked) != 1 {
		t.Errorf("creates asked for runtimes %v; want microvm only", f.asked)
	}
	if res.Runtime != "microvm" || res.CreatePooled != nil || !strings.Contains(res.Notes[KeyCreatePooled], "default runtime gvisor") {
		t.Errorf("runtime %q, create_pooled %+v, note %q; want absent, naming the pool's runtime", res.Runtime, res.CreatePooled, res.Notes[KeyCreatePooled])
	}
	if res.CreateUnpooled == nil || res.CreateUnpooled.N != 3 || res.ExecRTT == nil || res.Branch == nil {
		t.Errorf("create_unpooled %+v, exec_rtt %+v, branch %+v; want 3 samples each", res.CreateUnpooled, res.ExecRTT, res.Branch)
	}
	var keys []string
	for _, l := range res.Latencies() {
		keys = append(keys, l.Key)
	}
	if got := strings.Join(keys, ","); !strings.Contains(got, KeyBaselineQEMUBoot) || strings.Contains(got, "runsc") {
		t.Errorf("latencies %s; want QEMU's floors and not runsc's", got)
	}
	if res.Lifecycle == nil || res.Lifecycle.MemoryMB != DefaultMicroVMMemoryMB || res.Lifecycle.FillMiB != DefaultMicroVMFillMiB(DefaultMicroVMMemoryMB) {
		t.Errorf("lifecycle sandbox %+v; want %d MiB", res.Lifecycle, DefaultMicroVMMemoryMB)
	}
	if sbs, snaps := f.leftovers(); sbs != 0 || snaps != 0 {
		t.Errorf("left behind %d sandboxes and %d snapshots", sbs, snaps)
	}

	gOnly := newFakeServer(true, 0)
	cfg = fakeConfig(t, gOnly)
	cfg.Runtime = "microvm"
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "has no microvm runtime") {
		t.Fatalf("Run on a gVisor-only template: %v; want refused", err)
	}
	if gOnly.creates != 0 {
		t.Errorf("%d creates on a refused run", gOnly.creates)
	}
}
