package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// handleEnvs returns the environment every process starts from: the
// agent's own environment overlaid with /init envVars. The code-interpreter
// server inside the sandbox reads it.
func (a *Agent) handleEnvs(w http.ResponseWriter, _ *http.Request) {
	env := make(map[string]string, len(a.baseEnv))
	for k, v := range a.baseEnv {
		env[k] = v
	}
	for k, v := range a.settings.env() {
		env[k] = v
	}
	writeJSON(w, env)
}

// sandboxMetrics is envd's GET /metrics body.
type sandboxMetrics struct {
	Timestamp  int64   `json:"ts"`
	CPUCount   int     `json:"cpu_count"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   uint64  `json:"mem_total"`
	MemUsed    uint64  `json:"mem_used"`
	DiskUsed   uint64  `json:"disk_used"`
	DiskTotal  uint64  `json:"disk_total"`
}

// cpuSampleWindow is how long CPU usage is measured per request.
const cpuSampleWindow = 100 * time.Millisecond

func (a *Agent) handleMetrics(w http.ResponseWriter, r *http.Request) {
	m := sandboxMetrics{Timestamp: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	if pct, err := cpuUsedPercent(r, cpuSampleWindow); err == nil {
		m.CPUUsedPct = pct
	}
	if total, avail, err := readMeminfo(); err == nil {
		m.MemTotal, m.MemUsed = total, total-min(avail, total)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err == nil {
		bsize := uint64(st.Bsize)
		m.DiskTotal = st.Blocks * bsize
		m.DiskUsed = (st.Blocks - st.Bfree) * bsize
	}
	writeJSON(w, m)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// cpuTimes reads the aggregate "cpu" line of /proc/stat.
func cpuTimes() (busy, total uint64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("open /proc/stat: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		for i, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total, nil
	}
	return 0, 0, fmt.Errorf("no cpu line in /proc/stat")
}

func cpuUsedPercent(r *http.Request, window time.Duration) (float64, error) {
	busy1, total1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(window):
	case <-r.Context().Done():
		return 0, r.Context().Err()
	}
	busy2, total2, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if total2 <= total1 {
		return 0, nil
	}
	pct := float64(busy2-busy1) / float64(total2-total1) * 100
	return math.Round(pct*100) / 100, nil
}

// readMeminfo returns MemTotal and MemAvailable in bytes.
func readMeminfo() (total, available uint64, err error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("open /proc/meminfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = kb * 1024
		case "MemAvailable:":
			available = kb * 1024
		}
	}
	return total, available, sc.Err()
}
