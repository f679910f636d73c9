package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON writes v indented, for "get" commands whose output scripts parse.
func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns; call flush when done.
type table struct{ w *tabwriter.Writer }

func newTable(out io.Writer, headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.w.Flush() }

// ago renders how long ago t was, coarsely ("3m ago"), or "-" when unset.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return roughDuration(time.Since(t)) + " ago"
}

// until renders how long until t ("in 4m"), or "expired".
func until(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t)
	if d <= 0 {
		return "expired"
	}
	return "in " + roughDuration(d)
}

func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// humanBytes renders a size with a binary unit ("1.5 MiB").
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// formatMap renders metadata as "k=v,k2=v2" sorted by key, "-" when empty.
func formatMap(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	return keyValues(m).String()
}

// shortID keeps the first 12 characters of a content hash for tables.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
