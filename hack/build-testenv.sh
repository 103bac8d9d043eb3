#!/usr/bin/env bash
# Builds the binaries of the local control plane from their Go modules, through the Go module
# proxy, into a versioned cache outside git. Skips binaries that are already built.
#
#   hack/build-testenv.sh [component ...]     components: k8s k8s-gang etcd kwok volcano helm
#                                               lws jobset kuberay training-operator (default: all
#                                               of these, and kubelet: the real node); kueue
#                                               (only when named: bench_scale)
#   hack/build-testenv.sh --print-dir          prints the bin dir for the current pins and exits
#
# Each component is built once per version into ${KOHORT_TESTENV_CACHE:-~/.cache/kohort/testenv}/
# <component>-<version>/; <pins-hash>/bin holds symlinks to the binaries of the current pins.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

pins_hash=$(grep -v "^#" "$here/versions.env" | sha256sum | cut -c1-12)
cache_root=${KOHORT_TESTENV_CACHE:-$HOME/.cache/kohort/testenv}
bin_dir="$cache_root/$pins_hash/bin"

if [[ ${1:-} == --print-dir ]]; then
  echo "$bin_dir"
  exit 0
fi

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
mkdir -p "$bin_dir" "$cache_root/work"
start_all=$SECONDS

log() { printf '[build-testenv %4ds] %s\n' $((SECONDS - start_all)) "$*" >&2; }

# built DIR BINARY...: true when every binary exists in DIR; then links them into bin_dir.
built() {
  local dir=$1
  shift
  built_as "$dir" "" "$@"
}

# built_as DIR SUFFIX BINARY...: as built, linking each as <binary><SUFFIX>.
built_as() {
  local dir=$1 suffix=$2 b
  shift 2
  for b in "$@"; do [[ -x $dir/$b ]] || return 1; done
  for b in "$@"; do ln -sfn "$dir/$b" "$bin_dir/$b$suffix"; done
}

# new_wrapper DIR: an empty Go module to build third-party commands in.
new_wrapper() {
  rm -rf "$1" && mkdir -p "$1"
  (cd "$1" && go mod init kohort.local/testenv-wrapper >/dev/null 2>&1)
}

# gomod_of MODULE@VERSION: path of that module's go.mod in the module cache.
gomod_of() {
  go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["GoMod"]) if "GoMod" in d else sys.exit(d.get("Error","no GoMod"))'
}

# copy_replaces GOMOD STAGING_VERSION: mirror the replace block of GOMOD into the current module.
# Local staging paths (./staging/src/k8s.io/X) become k8s.io/X@STAGING_VERSION; version pins are
# copied as they are; other local paths are returned on stdout for the caller to resolve.
copy_replaces() {
  go mod edit -json "$1" | python3 -c '
import json, sys
staging_version = sys.argv[1]
for r in json.load(sys.stdin).get("Replace") or []:
    old, new = r["Old"], r["New"]
    old_s = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
    if new["Path"].startswith("./staging/src/k8s.io/"):
        print("edit", old_s + "=" + old["Path"] + "@" + staging_version)
    elif new.get("Version"):
        print("edit", old_s + "=" + new["Path"] + "@" + new["Version"])
    else:
        print("local", old["Path"])
' "$2" | while read -r kind arg; do
    if [[ $kind == edit ]]; then go mod edit -replace="$arg"; else echo "$arg"; fi
  done
}

version_ldflags() {
  local v=$1 minor
  minor=$(echo "$v" | cut -d. -f2)
  local date
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  echo "$flags"
}

# build_k8s_at VERSION SUFFIX BINARY...: k8s.io/kubernetes commands of VERSION, linked into
# bin_dir as <binary><SUFFIX>.
build_k8s_at() {
  local version=$1 suffix=$2
  shift 2
  local bins=("$@") dir="$cache_root/k8s-$version"
  if built_as "$dir" "$suffix" "${bins[@]}"; then log "k8s $version: already built"; return; fi
  local w="$cache_root/work/k8s-$version" t0=$SECONDS
  log "k8s $version: resolving modules (${bins[*]})"
  new_wrapper "$w"
  (
    cd "$w"
    local kk_mod staging_version go_directive
    kk_mod=$(gomod_of "k8s.io/kubernetes@$version")
    staging_version="v0.${version#v1.}"
    copy_replaces "$kk_mod" "$staging_version" >/dev/null
    go_directive=$(go mod edit -json "$kk_mod" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Go"])')
    go mod edit -go="$go_directive" -godebug="default=go$(echo "$go_directive" | cut -d. -f1,2)"
    go get "k8s.io/kubernetes@$version" >/dev/null
    log "k8s $version: compiling (cold: about 10 minutes on 2 cores)"
    go build -trimpath -ldflags "$(version_ldflags "$version")" -o "$w/out/" \
      "${bins[@]/#/k8s.io/kubernetes/cmd/}"
  )
  mkdir -p "$dir"
  local b
  for b in "${bins[@]}"; do mv "$w/out/$b" "$dir/$b"; done
  built_as "$dir" "$suffix" "${bins[@]}"
  log "k8s $version: done in $((SECONDS - t0))s"
}

build_k8s() {
  build_k8s_at "$K8S_VERSION" "" kube-apiserver kube-controller-manager kube-scheduler kubectl
}

# The kubelet of the same pinned Kubernetes, for the real node of hack/realnode.py.
build_kubelet() {
  build_k8s_at "$K8S_VERSION" "" kubelet
}

build_k8s_gang() {
  build_k8s_at "$K8S_GANG_VERSION" "-$K8S_GANG_VERSION" \
    kube-apiserver kube-controller-manager kube-scheduler
}

build_etcd() {
  local dir="$cache_root/etcd-$ETCD_VERSION"
  if built "$dir" etcd; then log "etcd $ETCD_VERSION: already built"; return; fi
  local w="$cache_root/work/etcd" t0=$SECONDS
  log "etcd $ETCD_VERSION: building"
  new_wrapper "$w"
  (
    cd "$w"
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
    go build -trimpath -ldflags "-s -w" -o "$w/out/etcd" go.etcd.io/etcd/server/v3
  )
  install_from "$w/out" "$dir" etcd
  log "etcd $ETCD_VERSION: done in $((SECONDS - t0))s"
}

build_kwok() {
  local dir="$cache_root/kwok-$KWOK_VERSION"
  if built "$dir" kwok; then log "kwok $KWOK_VERSION: already built"; return; fi
  local w="$cache_root/work/kwok" t0=$SECONDS
  log "kwok $KWOK_VERSION: building"
  new_wrapper "$w"
  (
    cd "$w"
    go get "sigs.k8s.io/kwok@$KWOK_VERSION" >/dev/null
    go build -trimpath -ldflags "-s -w" -o "$w/out/kwok" sigs.k8s.io/kwok/cmd/kwok
  )
  install_from "$w/out" "$dir" kwok
  log "kwok $KWOK_VERSION: done in $((SECONDS - t0))s"
}

build_volcano() {
  local dir="$cache_root/volcano-$VOLCANO_VERSION-apis-$VOLCANO_APIS_VERSION"
  if built "$dir" vc-scheduler vc-controller-manager; then
    log "volcano $VOLCANO_VERSION: already built"; return
  fi
  local w="$cache_root/work/volcano" t0=$SECONDS
  log "volcano $VOLCANO_VERSION: resolving modules"
  new_wrapper "$w"
  (
    cd "$w"
    local vc_mod local_paths p
    vc_mod=$(gomod_of "volcano.sh/volcano@$VOLCANO_VERSION")
    local_paths=$(copy_replaces "$vc_mod" unused)
    for p in $local_paths; do
      case $p in
        volcano.sh/apis) go mod edit -replace="volcano.sh/apis=volcano.sh/apis@$VOLCANO_APIS_VERSION" ;;
        *) echo "unexpected local replace in volcano go.mod: $p" >&2; exit 1 ;;
      esac
    done
    go get "volcano.sh/volcano@$VOLCANO_VERSION" >/dev/null
    log "volcano $VOLCANO_VERSION: compiling scheduler and controller-manager"
    go build -trimpath -ldflags "-s -w" -o "$w/out/" \
      volcano.sh/volcano/cmd/scheduler volcano.sh/volcano/cmd/controller-manager
    mv "$w/out/scheduler" "$w/out/vc-scheduler"
    mv "$w/out/controller-manager" "$w/out/vc-controller-manager"
  )
  install_from "$w/out" "$dir" vc-scheduler vc-controller-manager
  log "volcano $VOLCANO_VERSION: done in $((SECONDS - t0))s"
}

build_helm() {
  local dir="$cache_root/helm-$HELM_VERSION"
  if built "$dir" helm; then log "helm $HELM_VERSION: already built"; return; fi
  local w="$cache_root/work/helm" t0=$SECONDS
  log "helm $HELM_VERSION: building"
  new_wrapper "$w"
  (
    cd "$w"
    go get "helm.sh/helm/v3@$HELM_VERSION" >/dev/null
    go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
      -o "$w/out/helm" helm.sh/helm/v3/cmd/helm
  )
  install_from "$w/out" "$dir" helm
  log "helm $HELM_VERSION: done in $((SECONDS - t0))s"
}

# build_module_command NAME VERSION MODULE PACKAGE BINARY: one command of a third-party module,
# resolved with that module's own go.mod (its requirements and version pins) in a wrapper module.
build_module_command() {
  local name=$1 version=$2 module=$3 package=$4 bin=$5
  local dir="$cache_root/$name-$version"
  if built "$dir" "$bin"; then log "$name $version: already built"; return; fi
  local w="$cache_root/work/$name" t0=$SECONDS
  log "$name $version: building $package"
  new_wrapper "$w"
  (
    cd "$w"
    local mod local_paths
    mod=$(gomod_of "$module@$version")
    local_paths=$(copy_replaces "$mod" unused)
    if [[ -n $local_paths ]]; then
      echo "unexpected local replace in $module go.mod: $local_paths" >&2
      exit 1
    fi
    go get "$module@$version" >/dev/null
    go build -trimpath -ldflags "-s -w" -o "$w/out/$bin" "$package"
  )
  install_from "$w/out" "$dir" "$bin"
  log "$name $version: done in $((SECONDS - t0))s"
}

build_lws() {
  build_module_command lws "$LWS_VERSION" sigs.k8s.io/lws sigs.k8s.io/lws/cmd lws-manager
}

build_jobset() {
  build_module_command jobset "$JOBSET_VERSION" sigs.k8s.io/jobset sigs.k8s.io/jobset jobset-manager
}

build_kuberay() {
  build_module_command kuberay "$KUBERAY_VERSION" github.com/ray-project/kuberay/ray-operator \
    github.com/ray-project/kuberay/ray-operator kuberay-operator
}

build_training_operator() {
  build_module_command training-operator "$TRAINING_OPERATOR_VERSION" \
    github.com/kubeflow/training-operator \
    github.com/kubeflow/training-operator/cmd/training-operator.v1 training-operator
}

# Kueue's manager and its scheduler performance harness (the runner and minimalkueue, its reduced
# manager), for bench/bench_scale.py; not in the default list: the bench builds it on demand.
build_kueue() {
  local bins=(kueue-manager kueue-perf-runner kueue-minimalkueue)
  local dir="$cache_root/kueue-$KUEUE_VERSION"
  if built "$dir" "${bins[@]}"; then log "kueue $KUEUE_VERSION: already built"; return; fi
  local w="$cache_root/work/kueue" t0=$SECONDS
  log "kueue $KUEUE_VERSION: resolving modules"
  new_wrapper "$w"
  (
    cd "$w"
    local mod local_paths perf=sigs.k8s.io/kueue/test/performance/scheduler
    mod=$(gomod_of "sigs.k8s.io/kueue@$KUEUE_VERSION")
    local_paths=$(copy_replaces "$mod" unused)
    if [[ -n $local_paths ]]; then
      echo "unexpected local replace in kueue go.mod: $local_paths" >&2
      exit 1
    fi
    go get "sigs.k8s.io/kueue@$KUEUE_VERSION" >/dev/null
    log "kueue $KUEUE_VERSION: compiling the manager, the runner and minimalkueue"
    go build -trimpath -ldflags "-s -w" -o "$w/out/" \
      sigs.k8s.io/kueue/cmd/kueue "$perf/runner" "$perf/minimalkueue"
    mv "$w/out/kueue" "$w/out/kueue-manager"
    mv "$w/out/runner" "$w/out/kueue-perf-runner"
    mv "$w/out/minimalkueue" "$w/out/kueue-minimalkueue"
  )
  install_from "$w/out" "$dir" "${bins[@]}"
  log "kueue $KUEUE_VERSION: done in $((SECONDS - t0))s"
}

# install_from SRC DIR BINARY...: moves freshly built binaries into their cache dir, then links.
install_from() {
  local src=$1 dir=$2 b
  shift 2
  mkdir -p "$dir"
  for b in "$@"; do mv "$src/$b" "$dir/$b"; done
  built "$dir" "$@"
}

components=("$@")
((${#components[@]})) || components=(etcd kwok k8s kubelet k8s-gang volcano helm lws jobset kuberay training-operator)
for c in "${components[@]}"; do
  case $c in
    k8s|k8s-gang|kubelet|etcd|kwok|volcano|helm|lws|jobset|kuberay|training-operator|kueue) "build_${c//-/_}" ;;
    *) echo "unknown component: $c (k8s k8s-gang etcd kwok volcano helm lws jobset kuberay training-operator kueue kubelet)" >&2
       exit 2 ;;
  esac
done
log "all requested binaries are in $bin_dir"
echo "$bin_dir"
