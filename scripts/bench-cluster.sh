#!/usr/bin/env bash
# Benchmarks cluster mode against `space serve` on one machine: a private
# PostgreSQL, one `space control-plane` and 1 then 3 `space node`
# processes, and a `space serve`, each on data dirs of its own under
# /var/tmp. It runs `space bench` (create and exec latencies) against the
# control plane with one node and against serve back to back, --rounds
# times, then creates per second (the bench's throughput section) with one
# node, with serve, and with three nodes, and prints a comparison.
# Everything it started (processes, sandboxes, mounts, loop devices,
# network namespaces, PostgreSQL) is removed at the end or on Ctrl-C.
#
# Run as root from the repository: scripts/bench-cluster.sh [-n SAMPLES]
# [--rounds R] [--concurrency LIST] [--window DURATION] [--no-throughput]
# [--keep] [--hold]. With SERVE_BASELINE_BIN=DIR (a directory holding
# another build's space and space-agent) a serve of that build is measured
# in every round too, to show serve did not regress. --hold starts everything, prints the servers' URLs and
# keys and waits for Ctrl-C instead of benchmarking.
# See docs/performance.md, "Cluster mode".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SAMPLES=20
ROUNDS=2
CONCURRENCY=8
WINDOW=15s
KEEP=
THROUGHPUT=1
HOLD=
while [ $# -gt 0 ]; do
	case $1 in
	-n) SAMPLES=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--concurrency) CONCURRENCY=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	--no-throughput) THROUGHPUT=; shift ;;
	--hold) HOLD=1; shift ;;
	*) echo "usage: $0 [-n SAMPLES] [--rounds R] [--concurrency LIST] [--window DURATION] [--no-throughput] [--keep]" >&2; exit 2 ;;
	esac
done
if [ "$(id -u)" != 0 ]; then
	echo "bench-cluster: run as root: nodes and serve need btrfs, namespaces and nftables" >&2
	exit 1
fi

say() { echo "==> $(date -u +%H:%M:%S) $*" >&2; }

WORK=$(mktemp -d /var/tmp/space-bench-cluster.XXXXXX)
BIN=$WORK/bin
RESULTS=$WORK/results
mkdir -p "$BIN" "$RESULTS"
PIDS=()
PG_BIN=
PG_DATA=$WORK/pg/data
PG_USER=space-pg

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	say "cleaning up"
	# Sandboxes first, through the API, while the servers still run.
	for url_key in "${APIS[@]:-}"; do
		[ -n "$url_key" ] || continue
		local url=${url_key%%|*} key=${url_key#*|}
		for id in $(curl -fsS -H "Authorization: Bearer $key" "$url/v1/sandboxes" 2>/dev/null | jq -r '.sandboxes[].id' 2>/dev/null || true); do
			curl -fsS -X DELETE -H "Authorization: Bearer $key" "$url/v1/sandboxes/$id" >/dev/null 2>&1 || true
		done
	done
	local pid
	for pid in "${PIDS[@]:-}"; do
		[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]:-}"; do
		[ -n "$pid" ] || continue
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	# Sandboxes' runtime processes (pooled ones, leftovers), then mounts
	# (volumes, network namespaces) and the loop devices of the volume images.
	local p
	for p in /proc/[0-9]*/cmdline; do
		if { tr '\0' ' ' <"$p"; } 2>/dev/null | grep -qF "$WORK/"; then
			p=${p#/proc/}; kill -KILL "${p%/cmdline}" 2>/dev/null || true
		fi
	done
	sleep 0.3
	awk -v w="$WORK/" 'index($5, w) == 1 {print length($5), $5}' /proc/self/mountinfo | sort -rn | cut -d' ' -f2- |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done
	local img
	for img in "$WORK"/*/volumes.img; do
		[ -e "$img" ] || continue
		losetup -j "$img" | cut -d: -f1 | xargs -r losetup -d 2>/dev/null || true
	done
	if [ -n "$PG_BIN" ] && [ -d "$PG_DATA" ]; then
		runuser -u "$PG_USER" -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop >/dev/null 2>&1 || true
	fi
	if [ -n "$KEEP" ]; then
		say "kept $WORK (results in $RESULTS)"
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
APIS=()
trap cleanup EXIT
trap 'exit 130' INT TERM

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

say "building space and space-agent into $BIN"
CGO_ENABLED=0 go build -o "$BIN/space" ./cmd/space
CGO_ENABLED=0 go build -o "$BIN/space-agent" ./cmd/space-agent
RUNSC=$ROOT/.tools/bin/runsc
[ -x "$RUNSC" ] || { echo "bench-cluster: no $RUNSC" >&2; exit 1; }

say "starting PostgreSQL in $WORK/pg"
PG_BIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)")
id "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER"
mkdir -p "$WORK/pg"
chown "$PG_USER" "$WORK/pg"
chmod 755 "$WORK"
runuser -u "$PG_USER" -- "$PG_BIN/initdb" -D "$PG_DATA" -U space --auth=trust --encoding=UTF8 --no-locale --no-sync --no-instructions >"$WORK/pg/initdb.log"
PG_PORT=$(freeport)
runuser -u "$PG_USER" -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$WORK/pg/postgres.log" -w \
	-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$WORK/pg -c fsync=off -c full_page_writes=off -c max_connections=200" start >/dev/null
STORE="postgres://space@127.0.0.1:$PG_PORT/postgres?sslmode=disable"

TOKEN=$WORK/cluster.token
head -c 32 /dev/urandom | base64 >"$TOKEN"
chmod 600 "$TOKEN"

CP_LISTEN=127.0.0.1:$(freeport)
CP_URL=http://$CP_LISTEN
say "starting the control plane on $CP_URL"
"$BIN/space" control-plane --store "$STORE" --data-dir "$WORK/cp" --listen "$CP_LISTEN" \
	--e2b-listen "127.0.0.1:$(freeport)" --proxy-listen "127.0.0.1:$(freeport)" \
	--cluster-token-file "$TOKEN" >"$WORK/control-plane.log" 2>&1 &
PIDS+=($!)

UPLINKS=(10.211.0.0/20 10.212.0.0/20 10.213.0.0/20)
start_node() {
	local i=$1 listen=127.0.0.1:$(freeport)
	say "starting node $i on http://$listen (data dir $WORK/node$i, uplinks ${UPLINKS[$((i - 1))]})"
	"$BIN/space" node --data-dir "$WORK/node$i" --listen "$listen" --control-plane "$CP_URL" \
		--cluster-token-file "$TOKEN" --uplink-pool "${UPLINKS[$((i - 1))]}" --build-templates minimal \
		--runsc "$RUNSC" --agent "$BIN/space-agent" --volume-image-gib 8 >"$WORK/node$i.log" 2>&1 &
	PIDS+=($!)
}

# wait_key DIR: the admin key a server wrote to DIR/admin.key.
wait_key() {
	for _ in $(seq 600); do
		[ -s "$1/admin.key" ] && { cat "$1/admin.key"; return; }
		sleep 0.2
	done
	echo "bench-cluster: no admin key in $1 after 2 minutes" >&2
	return 1
}

# wait_ready URL KEY NODES: minimal ready, and (NODES > 0) that many nodes
# ready, each holding it.
wait_ready() {
	local url=$1 key=$2 nodes=$3 i
	for i in $(seq 900); do
		local tpl id
		tpl=$(curl -fsS -H "Authorization: Bearer $key" "$url/v1/templates/minimal" 2>/dev/null || true)
		if [ "$(jq -r '.state // empty' <<<"$tpl" 2>/dev/null)" = ready ]; then
			[ "$nodes" = 0 ] && return
			id=$(jq -r .id <<<"$tpl")
			local held
			held=$(curl -fsS -H "Authorization: Bearer $key" "$url/v1/nodes" |
				jq --arg t "$id" '[.nodes[] | select(.state == "ready" and ((.templates // []) | index($t)))] | length')
			[ "$held" = "$nodes" ] && return
		fi
		[ $((i % 25)) = 0 ] && say "  waiting for minimal ($url, $nodes node(s))"
		sleep 0.4
	done
	echo "bench-cluster: minimal not ready on $url after 6 minutes" >&2
	return 1
}

start_node 1
CP_KEY=$(wait_key "$WORK/cp")
APIS+=("$CP_URL|$CP_KEY")
wait_ready "$CP_URL" "$CP_KEY" 1
say "cluster with one node is ready"

# start_serve NAME BINDIR UPLINKS [FLAGS...]: a space serve of the build in
# BINDIR on data dir $WORK/NAME; sets SERVED_URL and SERVED_KEY.
start_serve() {
	local name=$1 bindir=$2 uplinks=$3 listen=127.0.0.1:$(freeport)
	shift 3
	SERVED_URL=http://$listen
	say "starting space serve $* ($bindir) on $SERVED_URL (data dir $WORK/$name)"
	"$bindir/space" serve --data-dir "$WORK/$name" --listen "$listen" --e2b-listen "127.0.0.1:$(freeport)" \
		--proxy-listen "127.0.0.1:$(freeport)" --build-templates minimal --pool "" --uplink-pool "$uplinks" \
		--runsc "$RUNSC" --agent "$bindir/space-agent" --volume-image-gib 8 "$@" >"$WORK/$name.log" 2>&1 &
	PIDS+=($!)
	SERVED_KEY=$(wait_key "$WORK/$name")
	APIS+=("$SERVED_URL|$SERVED_KEY")
}

start_serve serve "$BIN" 10.215.0.0/20
SERVE_URL=$SERVED_URL SERVE_KEY=$SERVED_KEY

# serve on the same PostgreSQL (a database of its own): what the store
# alone costs, apart from the node RPC.
runuser -u "$PG_USER" -- "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U space servepg
start_serve servepg "$BIN" 10.214.0.0/20 --store "postgres://space@127.0.0.1:$PG_PORT/servepg?sslmode=disable"
SERVEPG_URL=$SERVED_URL SERVEPG_KEY=$SERVED_KEY

OLD_URL= OLD_KEY=
if [ -n "${SERVE_BASELINE_BIN:-}" ]; then
	start_serve serveold "$SERVE_BASELINE_BIN" 10.216.0.0/20
	OLD_URL=$SERVED_URL OLD_KEY=$SERVED_KEY
fi
wait_ready "$SERVE_URL" "$SERVE_KEY" 0
wait_ready "$SERVEPG_URL" "$SERVEPG_KEY" 0
[ -z "$OLD_URL" ] || wait_ready "$OLD_URL" "$OLD_KEY" 0
say "the serves are ready"

if [ -n "$HOLD" ]; then
	echo "cluster: SPACE_URL=$CP_URL SPACE_API_KEY=$CP_KEY (logs in $WORK)"
	echo "serve:   SPACE_URL=$SERVE_URL SPACE_API_KEY=$SERVE_KEY"
	echo "serve on PostgreSQL: SPACE_URL=$SERVEPG_URL SPACE_API_KEY=$SERVEPG_KEY"
	say "holding until Ctrl-C"
	# A background sleep and wait, so that Ctrl-C runs the cleanup at once.
	while :; do sleep 3600 & wait $!; done
fi

# bench NAME URL KEY DATADIR ARGS...: one `space bench --json` run into
# $RESULTS/NAME.json, its progress on stderr.
bench() {
	local name=$1 url=$2 key=$3 dir=$4
	shift 4
	say "space bench: $name (load $(cut -d' ' -f1-3 /proc/loadavg))"
	SPACE_URL=$url SPACE_API_KEY=$key "$BIN/space" bench --template minimal --data-dir "$dir" \
		--runsc "$RUNSC" --json "$@" >"$RESULTS/$name.json" || say "  $name: some measurement failed (see its notes)"
}

LAT=(--skip density,throughput,lifecycle,baselines -n "$SAMPLES")
TPUT=(--skip create,exec_rtt,file_1mib,lifecycle,baselines,density --concurrency "$CONCURRENCY" --throughput-window "$WINDOW")
for r in $(seq "$ROUNDS"); do
	# Both orders, so neither side always runs second.
	if [ $((r % 2)) = 1 ]; then
		bench "cluster1-r$r" "$CP_URL" "$CP_KEY" "$WORK/node1" "${LAT[@]}"
		bench "serve-r$r" "$SERVE_URL" "$SERVE_KEY" "$WORK/serve" "${LAT[@]}"
		bench "servepg-r$r" "$SERVEPG_URL" "$SERVEPG_KEY" "$WORK/servepg" "${LAT[@]}"
		[ -z "$OLD_URL" ] || bench "serveold-r$r" "$OLD_URL" "$OLD_KEY" "$WORK/serveold" "${LAT[@]}"
	else
		[ -z "$OLD_URL" ] || bench "serveold-r$r" "$OLD_URL" "$OLD_KEY" "$WORK/serveold" "${LAT[@]}"
		bench "servepg-r$r" "$SERVEPG_URL" "$SERVEPG_KEY" "$WORK/servepg" "${LAT[@]}"
		bench "serve-r$r" "$SERVE_URL" "$SERVE_KEY" "$WORK/serve" "${LAT[@]}"
		bench "cluster1-r$r" "$CP_URL" "$CP_KEY" "$WORK/node1" "${LAT[@]}"
	fi
done
if [ -n "$THROUGHPUT" ]; then
	bench "cluster1-throughput" "$CP_URL" "$CP_KEY" "$WORK/node1" "${TPUT[@]}"
	bench "serve-throughput" "$SERVE_URL" "$SERVE_KEY" "$WORK/serve" "${TPUT[@]}"
	start_node 2
	start_node 3
	wait_ready "$CP_URL" "$CP_KEY" 3
	say "cluster with three nodes is ready"
	bench "cluster3-throughput" "$CP_URL" "$CP_KEY" "$WORK/node1" "${TPUT[@]}"
fi

# The comparison: p50s of each round side by side, then creates/s.
p50() { jq -r --arg k "$2" '.[$k].p50_ms // "-" | if type == "number" then (. * 10 | round / 10) else . end' "$RESULTS/$1.json" 2>/dev/null || echo "?"; }
echo
printf '%-18s %-6s %11s %11s %11s %14s %14s\n' "p50 ms" round serve "serve(pg)" "cluster(1)" "cluster-serve" "serve(baseline)"
for r in $(seq "$ROUNDS"); do
	for k in create_unpooled create_pooled create_first_exec exec_rtt file_1mib; do
		c=$(p50 "cluster1-r$r" "$k")
		s=$(p50 "serve-r$r" "$k")
		g=$(p50 "servepg-r$r" "$k")
		d=-
		[[ $c =~ ^[0-9.]+$ && $s =~ ^[0-9.]+$ ]] && d=$(awk -v c="$c" -v s="$s" 'BEGIN { printf "%+.1f", c - s }')
		o=-
		[ -z "$OLD_URL" ] || o=$(p50 "serveold-r$r" "$k")
		printf '%-18s %-6s %11s %11s %11s %14s %14s\n' "$k" "$r" "$s" "$g" "$c" "$d" "$o"
	done
done
tput() { jq -r '.throughput // {} | to_entries | map("c=\(.key) \(.value * 100 | round / 100)/s") | join(", ")' "$RESULTS/$1.json" 2>/dev/null || echo "?"; }
[ -n "$THROUGHPUT" ] && echo && echo "creates/s (the bench's throughput section: c workers loop create -> running -> delete for $WINDOW)"
if [ -n "$THROUGHPUT" ]; then
	echo "  serve:              $(tput serve-throughput)"
	echo "  cluster, 1 node:    $(tput cluster1-throughput)"
	echo "  cluster, 3 nodes:   $(tput cluster3-throughput)"
fi
for f in "$RESULTS"/*.json; do
	jq -r --arg f "$(basename "$f" .json)" '.notes // {} | to_entries[] | select(.value != "skipped") | "  note \($f) \(.key): \(.value)"' "$f" 2>/dev/null || true
done
OUT=${BENCH_CLUSTER_OUT:-/tmp/space-bench-cluster-results}
mkdir -p "$OUT" && cp "$RESULTS"/*.json "$OUT/" && say "the runs' JSON is in $OUT"
