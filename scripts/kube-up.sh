#!/usr/bin/env bash
# A one-machine Kubernetes cluster from the binaries scripts/kube-tools.sh
# builds: etcd (Debian), kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd 1.6 + runc (Debian) with CNI bridge/host-local,
# kubelet (cgroupfs, cgroup v1), kube-proxy (nftables) and CoreDNS as a host
# process. No registry is reachable: the images of .tools/images (the
# pause and busybox archives of scripts/image.sh, and any other *.oci.tar
# there) are imported into containerd.
#
# Usage:
#   scripts/kube-up.sh up     start everything, wait for the node Ready; writes $KUBE_UP_DIR/env
#   scripts/kube-up.sh down   stop every process and remove every mount, link, netns,
#                             nftables table, cgroup and directory "up" made
#   scripts/kube-up.sh check  prove it works: a pod IP, a ClusterIP from the host, DNS from a pod
#   scripts/kube-up.sh env    print the environment (KUBECONFIG, PATH, ...)
# then: source "$KUBE_UP_DIR/env"; kubectl get nodes; helm ...
#
# Everything lives under KUBE_UP_DIR (default /tmp/space-kube); ports are
# 16500-16999 (this script's range), the pod network 10.244.0.0/24 on bridge
# skube0, services 10.96.0.0/16, cluster DNS 10.97.0.10 (an address on the
# host's lo, where CoreDNS listens: this kernel has no dummy links). These
# are machine-wide, so there is one cluster per machine: up, down and check
# hold a lock (/tmp/space-kube.lock). "up" on a running cluster only checks
# it; it runs "down" first if a previous run left a half-started cluster.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
eval "$("$ROOT/scripts/kube-tools.sh" --print-dirs)"
DIR="${KUBE_UP_DIR:-/tmp/space-kube}"
IMAGES_DIR="${SPACE_IMAGES_DIR:-$ROOT/.tools/images}"
NODE_NAME="${KUBE_UP_NODE:-space-kube-node}"
BRIDGE=skube0
DNS_IP=10.97.0.10
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
CGROUP=space-kube
P_ETCD=16579 P_ETCD_PEER=16580 P_API=16543 P_KCM=16557 P_SCHED=16559
P_KUBELET=16550 P_KUBELET_HEALTH=16548 P_PROXY_HEALTH=16556 P_PROXY_METRICS=16549
P_DNS_HEALTH=16581 P_DNS_READY=16582
SOCK="$DIR/containerd/containerd.sock"
API="" # https://<node IP>:$P_API, set by up

log() { echo "$(date -u +%H:%M:%S) kube-up: $*"; }
die() { log "ERROR: $*"; exit 1; }

# node_ip: the address of the default route's interface. The kubelet refuses
# a loopback node IP, and the API server must reach the kubelet on it.
node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<NF;i++) if ($i=="src") {print $(i+1); exit}}'; }

start_proc() { # NAME CMD...: run in its own session, log and pid under $DIR
  local name="$1"; shift
  # fd 8 is the lock: a daemon holding it would block every later run
  setsid "$@" >"$DIR/log/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$DIR/run/$name.pid"
  log "started $name (pid $!, log $DIR/log/$name.log)"
}

alive() { [ -f "$DIR/run/$1.pid" ] && kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null; }

# wait_for WHAT SECONDS CMD...: retry CMD each second, a progress line every
# 10 s, failing with the tail of the component's log.
wait_for() {
  local what="$1" limit="$2" comp="$3"; shift 3
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if [ -n "$comp" ] && ! alive "$comp"; then
      tail -n 30 "$DIR/log/$comp.log" >&2 || true; die "$comp exited while waiting for $what"
    fi
    if (( SECONDS - start >= limit )); then
      [ -n "$comp" ] && tail -n 30 "$DIR/log/$comp.log" >&2
      die "$what not reached after ${limit}s"
    fi
    (( (SECONDS - start) % 10 == 9 )) && log "  waiting for $what ($((SECONDS - start))s)"
    sleep 1
  done
  log "$what after $((SECONDS - start))s"
}

kc() { "$KUBE_BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }

kubeconfig() { # FILE TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: space-kube
  cluster: {server: "$API", certificate-authority: "$DIR/pki/ca.crt"}
users:
- name: user
  user: {token: "$2"}
contexts:
- name: space-kube
  context: {cluster: space-kube, user: user}
current-context: space-kube
EOF
}

add_token() { # KUBECONFIG-NAME USER [GROUP]: a token line and a kubeconfig using it
  local tok; tok="$(openssl rand -hex 16)"
  echo "$tok,$2,$2${3:+,$3}" >>"$DIR/pki/tokens.csv"
  kubeconfig "$DIR/$1.kubeconfig" "$tok"
}

gen_pki() {
  local d="$DIR/pki" ip="$1"
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=space-kube-ca -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kube-apiserver \
    -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' "$ip" >"$d/apiserver.ext"
  openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/apiserver.ext" -out "$d/apiserver.crt" 2>/dev/null
  # The API server's client certificate towards kubelets (logs, exec).
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
    -keyout "$d/kubelet-client.key" -out "$d/kubelet-client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$d/client.ext"
  openssl x509 -req -in "$d/kubelet-client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/client.ext" -out "$d/kubelet-client.crt" 2>/dev/null
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/sa.key" 2>/dev/null
  openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  # One static token per component: simpler than a client certificate each,
  # and the Node authorizer only looks at the user name and group.
  : >"$d/tokens.csv"
  add_token admin admin system:masters
  add_token kube-controller-manager system:kube-controller-manager
  add_token kube-scheduler system:kube-scheduler
  add_token kubelet "system:node:$NODE_NAME" system:nodes
  add_token kube-proxy system:kube-proxy
  # CoreDNS lists services and endpoint slices cluster-wide: system:masters
  # spares a ClusterRole for a test cluster.
  add_token coredns coredns system:masters
}

# Every hierarchy, the empty v2 "unified" one included: runc mirrors its
# cgroups there on a hybrid host.
cgroup_dirs() { local c; for c in /sys/fs/cgroup/*/; do echo "${c%/}/$CGROUP"; done; }

# The kubelet puts its pods under this cgroup in every v1 hierarchy, so that
# "down" finds every process a pod started and removes exactly its own cgroups.
make_cgroups() {
  local d
  for d in $(cgroup_dirs); do
    mkdir -p "$d"
    if [ -f "${d%/*}/cpuset.cpus" ]; then # a v1 cpuset child starts empty
      cat "${d%/*}/cpuset.cpus" >"$d/cpuset.cpus"; cat "${d%/*}/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

write_configs() {
  local ip="$1"
  mkdir -p "$DIR/containerd" "$DIR/cni/net.d" "$DIR/kubelet" "$DIR/coredns"
  cat >"$DIR/containerd/config.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
# plugins that would write outside DIR or need what this host lacks
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$DIR/containerd/containerd.sock.ttrpc"
[debug]
  address = "$DIR/containerd/debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  # pod netns under DIR, so that "down" finds them with the other mounts
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: a negative oom_score_adj (the pause container's
  # -998) is refused, so none below containerd's own
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = ""
EOF
  # No ipMasq: nothing outside is reachable anyway, and it would need
  # iptables. portmap uses its nftables backend (table cni_hostport).
  cat >"$DIR/cni/net.d/10-space-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "space-kube",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$DIR/cni/ipam", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}}
  ]
}
EOF
  cat >"$DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroups are v1 here and there is no systemd
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
address: $ip
port: $P_KUBELET
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $P_KUBELET_HEALTH
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $DIR/pod-logs
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: Webhook}
# a shared build machine: do not taint the node for a full disk or busy memory
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  cat >"$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $DIR/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
bindAddress: $ip
healthzBindAddress: 127.0.0.1:$P_PROXY_HEALTH
metricsBindAddress: 127.0.0.1:$P_PROXY_METRICS
clusterCIDR: 10.244.0.0/16
# leave the host's conntrack sysctls alone
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  cat >"$DIR/coredns/Corefile" <<EOF
.:53 {
    bind $DNS_IP
    errors
    health 127.0.0.1:$P_DNS_HEALTH
    ready 127.0.0.1:$P_DNS_READY
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $DIR/coredns.kubeconfig space-kube
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
EOF
}

up() {
  local k
  for k in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    [ -x "$KUBE_BIN/$k" ] || die "$KUBE_BIN/$k missing: run scripts/kube-tools.sh"
  done
  for k in bridge host-local loopback portmap; do [ -x "$CNI_BIN/$k" ] || die "$CNI_BIN/$k missing: run scripts/kube-tools.sh"; done
  [ -x "$COREDNS_BIN/coredns" ] || die "$COREDNS_BIN/coredns missing: run scripts/kube-tools.sh"
  for k in etcd containerd containerd-shim-runc-v2 runc ctr openssl nft ip; do
    command -v "$k" >/dev/null || die "$k not found: run scripts/install-deps.sh"
  done
  if [ -f "$DIR/env" ] && alive kubelet && kc get --raw /readyz >/dev/null 2>&1; then
    log "cluster already up ($DIR/env)"; return 0
  fi
  [ -d "$DIR" ] && { log "a previous cluster left $DIR behind, removing it first"; down; }

  local ip; ip="$(node_ip)"; [ -n "$ip" ] || die "no default-route address for the node"
  # The API server listens on the node IP, not loopback: pods reach it
  # through the kubernetes Service, which kube-proxy translates to that IP.
  API="https://$ip:$P_API"
  log "node $NODE_NAME, node IP $ip, API $API, state in $DIR"
  mkdir -p "$DIR/log" "$DIR/run"
  nft list tables >"$DIR/nft-tables.before"
  gen_pki "$ip"
  write_configs "$ip"
  make_cgroups
  # Pods reach it through their default route to the bridge: a local
  # address answers on any interface.
  ip addr add "$DNS_IP/32" dev lo

  start_proc etcd etcd --name space-kube --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$P_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_ETCD_PEER" \
    --initial-cluster "space-kube=http://127.0.0.1:$P_ETCD_PEER"
  start_proc kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$P_ETCD" --bind-address "$ip" --advertise-address "$ip" \
    --secure-port "$P_API" --cert-dir "$DIR/pki/apiserver" \
    --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
    --client-ca-file "$DIR/pki/ca.crt" --token-auth-file "$DIR/pki/tokens.csv" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --kubelet-client-certificate "$DIR/pki/kubelet-client.crt" --kubelet-client-key "$DIR/pki/kubelet-client.key" \
    --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --authorization-mode Node,RBAC --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false \
    --allow-privileged=true
  wait_for "kube-apiserver /readyz" 300 kube-apiserver kc get --raw /readyz

  start_proc kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kube-controller-manager.kubeconfig" --bind-address 127.0.0.1 --secure-port "$P_KCM" \
    --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
    --cluster-signing-cert-file "$DIR/pki/ca.crt" --cluster-signing-key-file "$DIR/pki/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
  start_proc kube-scheduler "$KUBE_BIN/kube-scheduler" \
    --kubeconfig "$DIR/kube-scheduler.kubeconfig" --bind-address 127.0.0.1 --secure-port "$P_SCHED" \
    --leader-elect=false --profiling=false

  start_proc containerd containerd --config "$DIR/containerd/config.toml"
  wait_for "containerd socket" 60 containerd ctr -a "$SOCK" version
  local img
  for img in "$IMAGES_DIR"/*.oci.tar; do
    [ -f "$img" ] || continue
    log "importing $(basename "$img") into containerd"
    ctr -a "$SOCK" -n k8s.io images import "$img" >/dev/null || die "import of $img failed"
  done
  ctr -a "$SOCK" -n k8s.io images ls -q | grep -qx registry.k8s.io/pause:3.10 \
    || die "no registry.k8s.io/pause:3.10 in $IMAGES_DIR (scripts/image.sh pause builds it)"

  start_proc kubelet "$KUBE_BIN/kubelet" --config "$DIR/kubelet/config.yaml" \
    --kubeconfig "$DIR/kubelet.kubeconfig" --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$ip" --node-labels space.dev/node=true
  start_proc kube-proxy "$KUBE_BIN/kube-proxy" --config "$DIR/kube-proxy.yaml"
  start_proc coredns "$COREDNS_BIN/coredns" -conf "$DIR/coredns/Corefile"

  wait_for "node $NODE_NAME Ready" 300 kubelet \
    sh -c "'$KUBE_BIN/kubectl' --kubeconfig '$DIR/admin.kubeconfig' get node '$NODE_NAME' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for "kube-proxy synced" 120 kube-proxy curl -fsS "http://127.0.0.1:$P_PROXY_HEALTH/healthz"
  wait_for "CoreDNS ready" 120 coredns curl -fsS "http://127.0.0.1:$P_DNS_READY/ready"
  wait_for "default service account" 120 kube-controller-manager kc -n default get serviceaccount default

  cat >"$DIR/env" <<EOF
export KUBECONFIG=$DIR/admin.kubeconfig
export PATH=$KUBE_BIN:$HELM_BIN:\$PATH
export KUBE_UP_DIR=$DIR
export KUBE_UP_NODE=$NODE_NAME
export KUBE_UP_DNS=$DNS_IP
export CONTAINERD_ADDRESS=$SOCK
export CONTAINERD_NAMESPACE=k8s.io
EOF
  log "cluster up: source $DIR/env (KUBECONFIG=$DIR/admin.kubeconfig)"
}

stop_pidfile() { # NAME: SIGTERM, then SIGKILL after 15 s
  local f="$DIR/run/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { log "$1 ignored SIGTERM, killing it"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$f"
  log "stopped $1"
}

# kill_cgroup_procs: every process in the pods' cgroups (containers, pause).
kill_cgroup_procs() {
  local d p
  for d in $(cgroup_dirs); do
    [ -d "$d" ] || continue
    # a cgroup may vanish under find: its error must not end the teardown
    { find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | while read -r p; do kill -KILL "$p" 2>/dev/null || true; done
  done
}

# our_shims: containerd-shim processes serving our containerd (its socket
# path is on their command line); shims outlive containerd.
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $SOCK " && echo "${p#/proc/}"
  done
  return 0
}

down() {
  # The links, tables and cgroups below are machine-wide: without the state
  # directory there is no cluster of ours to take them from.
  if [ ! -d "$DIR" ]; then log "no cluster in $DIR, nothing to tear down"; return 0; fi
  log "tearing down the cluster in $DIR"
  local n
  # Components first (clients before servers), so nothing restarts a pod.
  for n in coredns kube-proxy kubelet kube-scheduler kube-controller-manager; do stop_pidfile "$n"; done
  kill_cgroup_procs
  for n in $(our_shims); do kill -KILL "$n" 2>/dev/null || true; done
  stop_pidfile containerd
  for n in kube-apiserver etcd; do stop_pidfile "$n"; done
  kill_cgroup_procs

  # Pod network namespaces (containerd names them cni-<uuid> under
  # /var/run/netns): ours are those with an address of the pod CIDR.
  # Deleting one also deletes its veth pair.
  local ns prefix=${POD_CIDR%.*}.
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do
    if ip -n "$ns" -4 -o addr show 2>/dev/null | grep -q " inet ${prefix//./\\.}"; then
      umount "/var/run/netns/$ns" 2>/dev/null || true
      ip netns delete "$ns" 2>/dev/null || rm -f "/var/run/netns/$ns"
      log "removed netns $ns"
    fi
  done
  # Mounts under DIR (overlay rootfs, shm, projected volumes), deepest first.
  if [ -n "$DIR" ]; then
    awk -v d="$DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do
      if umount -l "$m" 2>/dev/null; then log "unmounted $m"; fi
    done
  fi
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE" && log "removed bridge $BRIDGE"
  ip -4 -o addr show dev lo | grep -q " $DNS_IP/32 " && ip addr del "$DNS_IP/32" dev lo && log "removed $DNS_IP from lo"
  local t
  for t in "ip kube-proxy" "ip6 kube-proxy" "inet kube-proxy" "ip cni_hostport" "ip6 cni_hostport" "inet cni_hostport"; do
    # shellcheck disable=SC2086
    nft list table $t >/dev/null 2>&1 && nft delete table $t && log "removed nftables table $t"
  done
  # The kubelet's iptables chains (canaries, KUBE-FIREWALL), made through
  # iptables-nft, which also makes its tables: a table that did not exist
  # before "up" goes whole, in one that did only the kubelet's chains and
  # the rules jumping to them go.
  local fam tbl ch h
  for fam in ip ip6; do
    for tbl in mangle nat filter; do
      nft list table "$fam" "$tbl" >/dev/null 2>&1 || continue
      if [ -f "$DIR/nft-tables.before" ] && ! grep -qx "table $fam $tbl" "$DIR/nft-tables.before"; then
        nft delete table "$fam" "$tbl" && log "removed table $fam $tbl"
        continue
      fi
      for h in $(nft -a list table "$fam" "$tbl" 2>/dev/null | awk '/jump KUBE-(FIREWALL|KUBELET-CANARY|IPTABLES-HINT)/ {print $NF}'); do
        for ch in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do nft delete rule "$fam" "$tbl" "$ch" handle "$h" 2>/dev/null && break; done
      done
      for ch in KUBE-FIREWALL KUBE-IPTABLES-HINT KUBE-KUBELET-CANARY; do
        nft delete chain "$fam" "$tbl" "$ch" 2>/dev/null && log "removed chain $ch of table $fam $tbl"
      done
    done
  done
  # Cgroups, leaves first (rmdir fails on a cgroup with children or tasks).
  local d
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && { find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; }
    [ -d "$d" ] && log "WARNING: cgroup $d still has processes"
  done
  # The kubelet links container logs in the fixed /var/log/containers.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$DIR/*" -delete
  fi
  rm -rf "$DIR"
  log "down: nothing of the cluster is left"
}

# check: the proof that the cluster works end to end. A busybox pod serving
# HTTP gets a pod IP, a Service's ClusterIP reaches it from the host through
# kube-proxy, the pod resolves the API server's name through CoreDNS, reaches
# its own Service by name and the API server through its ClusterIP.
check() {
  [ -f "$DIR/env" ] || die "no cluster in $DIR: run $0 up"
  kc delete namespace kube-up-check --ignore-not-found --wait=true --timeout=120s >/dev/null
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: kube-up-check}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: kube-up-check, labels: {app: web}}
spec:
  nodeSelector: {space.dev/node: "true"}
  containers:
  - name: web
    image: docker.io/library/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, 'mkdir -p /www && echo kube-up-ok > /www/index.html && exec httpd -f -p 8080 -h /www']
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: kube-up-check}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
  wait_for "check pod Ready" 120 kubelet kc -n kube-up-check wait --for=condition=Ready pod/web --timeout=5s
  local pod_ip svc_ip out
  pod_ip="$(kc -n kube-up-check get pod web -o jsonpath='{.status.podIP}')"
  svc_ip="$(kc -n kube-up-check get svc web -o jsonpath='{.spec.clusterIP}')"
  log "check pod IP $pod_ip, service ClusterIP $svc_ip"
  case "$pod_ip" in "${POD_CIDR%.*}".*) ;; *) die "pod IP $pod_ip is not in $POD_CIDR" ;; esac
  wait_for "ClusterIP $svc_ip:80 from the host" 60 kube-proxy sh -c "curl -fsS --max-time 3 http://$svc_ip/ | grep -qx kube-up-ok"
  out="$(kc -n kube-up-check exec web -- nslookup kubernetes.default.svc.cluster.local 2>&1)" \
    || die "DNS lookup from the pod failed: $out"
  echo "$out" | grep -q 'Address.*10\.96\.0\.1' || die "kubernetes.default.svc.cluster.local did not resolve to 10.96.0.1: $out"
  log "DNS from the pod: kubernetes.default.svc.cluster.local -> 10.96.0.1"
  # From the pod back to itself through its Service (hairpin on the bridge),
  # whose name resolves to the ClusterIP, and to the API server through the
  # kubernetes Service. With nc: the static busybox's wget segfaults here.
  out="$(kc -n kube-up-check exec web -- nslookup web.kube-up-check.svc.cluster.local 2>&1)" \
    && echo "$out" | grep -q "Address.*$svc_ip" || die "web.kube-up-check.svc.cluster.local did not resolve to $svc_ip: $out"
  out="$(kc -n kube-up-check exec web -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $svc_ip 80" 2>&1)" \
    && echo "$out" | grep -qx kube-up-ok || die "the pod did not reach its own Service $svc_ip: $out"
  kc -n kube-up-check exec web -- nc -w 5 10.96.0.1 443 </dev/null || die "the pod did not reach the API server at 10.96.0.1:443"
  log "from the pod: its own Service (name and ClusterIP) and the API server's ClusterIP"
  kc delete namespace kube-up-check --wait=false >/dev/null
  log "check passed"
}

# The cluster is machine-wide (fixed ports, bridge, cgroup, nftables tables),
# whatever KUBE_UP_DIR says: one up/down/check at a time, so that a second
# "up" waits for the first and then finds its cluster, instead of taking a
# half-started one for a leftover and tearing it down.
if [ "${1:-up}" != env ]; then
  exec 8>"${KUBE_UP_LOCK:-/tmp/space-kube.lock}"
  if ! flock -n 8; then
    log "another kube-up.sh holds ${KUBE_UP_LOCK:-/tmp/space-kube.lock}, waiting for it"
    flock 8
  fi
fi

case "${1:-up}" in
  up) up ;;
  check) check ;;
  down) down ;;
  env) cat "$DIR/env" ;;
  *) echo "usage: $0 up|down|check|env" >&2; exit 2 ;;
esac
