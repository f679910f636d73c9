#!/usr/bin/env bash
# Compares `space serve` of two revisions back to back on this machine:
# each revision's space and space-agent are built from the repository's
# history (scripts/build-revision.sh), then for each round, A
# then B, a server of that revision starts on a fresh data dir and the
# current tree's `space bench` measures it. Rounds alternate so that a
# machine that drifts during the run weighs on both alike.
#
#   ./scripts/bench-compare.sh REV_A REV_B [ROUNDS] [-- bench flags]
#
# The JSON of each run is kept in .tools/bench-compare/<rev>-<round>.json;
# a table of the p50 of each figure per revision closes the run. Run as
# root on a quiet machine (nothing else busy: the figures are latencies).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ]; then
  echo "usage: $0 REV_A REV_B [ROUNDS] [-- bench flags]" >&2
  exit 2
fi
rev_a=$(git rev-parse --verify "$1^{commit}")
rev_b=$(git rev-parse --verify "$2^{commit}")
shift 2
rounds=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  rounds=$1
  shift
fi
[ "${1:-}" = "--" ] && shift
bench_flags=("$@")
if [ ${#bench_flags[@]} -eq 0 ]; then
  bench_flags=(--template minimal --skip density,throughput -n 20)
fi

./scripts/build.sh >/dev/null
out=.tools/bench-compare
mkdir -p "$out" .tools/cache

# measure REV ROUND: one server of REV, one bench.
measure() {
  local rev=$1 round=$2 bin data port pid
  bin=$(./scripts/build-revision.sh "$rev")
  data=$(mktemp -d /var/tmp/space-bench-XXXXXX)
  port=$((7300 + RANDOM % 500))
  echo "==> round $round: ${rev:0:12} on 127.0.0.1:$port" >&2
  "$bin/space" serve --data-dir "$data" --listen "127.0.0.1:$port" --e2b-listen "" --proxy-listen "" \
    --build-templates minimal --pool "" --runsc .tools/bin/runsc --agent "$bin/space-agent" >"$data.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    if SPACE_URL="http://127.0.0.1:$port" SPACE_DATA_DIR="$data" .tools/bin/space template ls 2>/dev/null | grep -q '^minimal *ready'; then
      break
    fi
    sleep 0.2
  done
  SPACE_URL="http://127.0.0.1:$port" SPACE_DATA_DIR="$data" \
    .tools/bin/space bench "${bench_flags[@]}" --data-dir "$data" --json >"$out/${rev:0:12}-$round.json"
  kill "$pid"
  wait "$pid" || true
  # The server leaves no sandbox (bench deletes what it made); what it
  # keeps mounted under its data dir (volumes, namespaces; an older
  # release keeps them after it stops) goes with the data dir.
  { findmnt -rno TARGET | grep "^$data/" || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf "$data" "$data.log"
}

for round in $(seq "$rounds"); do
  measure "$rev_a" "$round"
  measure "$rev_b" "$round"
done

python3 - "$out" "${rev_a:0:12}" "${rev_b:0:12}" "$rounds" <<'EOF'
import json, sys, statistics
out, a, b, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def p50s(rev):
    figures = {}
    for r in range(1, rounds + 1):
        data = json.load(open(f"{out}/{rev}-{r}.json"))
        for name, v in data.items():
            if isinstance(v, dict) and "p50_ms" in v:
                figures.setdefault(name, []).append(v["p50_ms"])
    return figures
fa, fb = p50s(a), p50s(b)
print(f"{'figure (p50 ms, median of rounds)':40} {a:>12} {b:>12} {'b/a':>6}")
for name in sorted(set(fa) | set(fb)):
    va = statistics.median(fa[name]) if name in fa else float("nan")
    vb = statistics.median(fb[name]) if name in fb else float("nan")
    print(f"{name:40} {va:12.2f} {vb:12.2f} {vb / va if va else float('nan'):6.2f}")
EOF
