#!/usr/bin/env bash
# Regenerates internal/agent/gen (the agent's services),
# internal/noderpc/gen (the node service, proto/space/node) and
# internal/clusterrpc/gen (the cluster service, proto/space/cluster) from proto/. The
# generated code is committed, so CI never runs this; run it after editing a
# .proto file. Tool versions are pinned so regeneration is reproducible.
set -euo pipefail

BUF_VERSION="${BUF_VERSION:-v1.65.0}"
PROTOC_GEN_GO_VERSION="${PROTOC_GEN_GO_VERSION:-v1.36.11}"
PROTOC_GEN_CONNECT_GO_VERSION="${PROTOC_GEN_CONNECT_GO_VERSION:-v1.19.1}"

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/.tools/bin"
mkdir -p "$bin"

install_tool() { # pkg version binary
  local stamp="$bin/.$3-$2"
  if [ ! -x "$bin/$3" ] || [ ! -f "$stamp" ]; then
    echo "==> installing $1@$2"
    GOFLAGS= GOBIN="$bin" go install "$1@$2"
    rm -f "$bin/.$3-"*; touch "$stamp"
  fi
}
install_tool github.com/bufbuild/buf/cmd/buf "$BUF_VERSION" buf
install_tool google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION" protoc-gen-go
install_tool connectrpc.com/connect/cmd/protoc-gen-connect-go "$PROTOC_GEN_CONNECT_GO_VERSION" protoc-gen-connect-go

cd "$root/proto"
PATH="$bin:$PATH" buf generate
PATH="$bin:$PATH" buf generate --template buf.gen.node.yaml
PATH="$bin:$PATH" buf generate --template buf.gen.cluster.yaml
echo "==> generated into internal/agent/gen, internal/noderpc/gen and internal/clusterrpc/gen"
