#!/usr/bin/env bash
# Builds kohort's image without Docker and without any container registry (`make image`):
#   1. a wheelhouse: kohort's wheel and its pinned dependencies' wheels (constraints.txt);
#   2. a root file system of Debian bookworm packages (mmdebstrap, essential packages and
#      python3.11 only) in which the same steps as the Dockerfile's run: a venv at /opt/kohort, the
#      wheels installed from the wheelhouse, bytecode compiled, the user 65532 added;
#   3. that file system as the single layer of an OCI image layout (umoci), with the Dockerfile's
#      user, entrypoint, environment, working directory and ports.
# Reproducible: SOURCE_DATE_EPOCH (the time of the last commit that changed the image's inputs)
# fixes every mtime and the image's creation time, mmdebstrap writes the tar sorted, and bytecode
# is hash-checked, not timestamped, so the same inputs (sources, wheels, Debian packages) give
# the same digest.
# Needs root and Debian's mmdebstrap and umoci (hack/install-image-tools.sh installs them).
#
#   hack/build-image.sh [OUT]      OUT defaults to .kohort/image; prints the digest, size, time
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(realpath -m "${1:-$ROOT/.kohort/image}")
CACHE=${KOHORT_IMAGE_CACHE:-$HOME/.cache/kohort/image}
PYTHON=${PYTHON:-python3}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
TAG=${TAG:-$VERSION}
SUITE=bookworm
start=$(date +%s.%N)

bash "$ROOT/hack/install-image-tools.sh"
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "build-image: no $tool (Debian's package $tool)" >&2; exit 1; }
done

# The last commit that changed what goes into the image names it (its revision label) and dates
# it: a commit that changes only docs or tests leaves the digest as it was.
INPUTS=(pyproject.toml constraints.txt README.md kohort controller webhook certs dashboard
  hack/build-image.sh hack/image-rootfs.sh)
REVISION=$(git -C "$ROOT" log -1 --format=%H -- "${INPUTS[@]}")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct "$REVISION")}
# IF_STALE=1 (make test): nothing to do when the image there was built from the inputs as they are.
if [[ ${IF_STALE:-} == 1 && -f $OUT/revision && $(cat "$OUT/revision") == "$REVISION" ]] &&
  git -C "$ROOT" diff --quiet "$REVISION" -- "${INPUTS[@]}"; then
  echo "build-image: $OUT is up to date (revision $REVISION)"
  exit 0
fi
mkdir -p "$CACHE/debs" "$CACHE/wheels" "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The wheelhouse. pip's own cache makes a warm build download nothing; the pip wheel is only
#    there to run the install inside the root file system (the image itself carries no pip).
#    kohort's wheel is built from a copy of what the Dockerfile copies (building in the checkout
#    would reuse its build/ dir, where a removed module lives on).
wheels=$work/wheels
mkdir "$work/src"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - pyproject.toml constraints.txt \
  README.md kohort controller webhook certs dashboard | tar -C "$work/src" -xf -
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --cache-dir "$CACHE/wheels" \
  --constraint "$ROOT/constraints.txt" --wheel-dir "$wheels" "$work/src"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --cache-dir "$CACHE/wheels" \
  --no-deps --only-binary=:all: --dest "$work/pip" "pip==$("$PYTHON" -m pip --version | cut -d' ' -f2)"

# 2. The root file system. Docs, manuals and translations are left out (the copyright files
#    stay); Debian's packages are kept in the cache between builds, and apt's lock and partial
#    downloads, which would carry an earlier build's mtimes, are not (the image has no apt).
#    The steps inside are hack/image-rootfs.sh, which the Dockerfile runs too.
rootfs=$work/rootfs.tar
pip_wheel=$(echo "$work"/pip/pip-*.whl)
mmdebstrap --quiet --variant=essential --include=python3.11 \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --skip=download/empty --skip=essential/unlink \
  --setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
  --setup-hook="sync-in $CACHE/debs/ /var/cache/apt/archives/" \
  --customize-hook="sync-out /var/cache/apt/archives $CACHE/debs" \
  --customize-hook="rm -rf $CACHE/debs/lock $CACHE/debs/partial" \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/cache/apt/archives/lock' \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/partial' \
  --customize-hook="copy-in $ROOT/hack/image-rootfs.sh /tmp" \
  --customize-hook="copy-in $wheels /tmp" \
  --customize-hook="copy-in $pip_wheel /tmp" \
  --customize-hook="chroot \"\$1\" env SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH sh /tmp/image-rootfs.sh /tmp/wheels /tmp/${pip_wheel##*/}" \
  --customize-hook='rm -rf "$1"/tmp/wheels "$1"/tmp/pip-*.whl "$1"/tmp/image-rootfs.sh' \
  "$SUITE" "$rootfs"

# 3. The OCI image layout: one layer, the Dockerfile's configuration, no history entries (they
#    would carry the time of the build).
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
layout=$work/oci
umoci init --layout "$layout"
umoci new --image "$layout:$TAG"
umoci raw add-layer --no-history --image "$layout:$TAG" "$rootfs"
umoci config --no-history --image "$layout:$TAG" --created "$created" \
  --author kohort --os linux --architecture amd64 \
  --config.user 65532:65532 --config.workingdir /tmp \
  --config.env PATH=/opt/kohort/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
  --config.entrypoint kohort --config.cmd --help \
  --config.exposedports 9443/tcp --config.exposedports 8443/tcp \
  --config.exposedports 8080/tcp --config.exposedports 8081/tcp \
  --config.label org.opencontainers.image.version="$VERSION" \
  --config.label org.opencontainers.image.revision="$REVISION"
umoci gc --layout "$layout"

rm -rf "$OUT/oci"
mv "$layout" "$OUT/oci"
digest=$(umoci stat --image "$OUT/oci:$TAG" --json >/dev/null && \
  "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$OUT/oci/index.json")
layer_bytes=$(du -sb "$OUT/oci/blobs" | cut -f1)
rootfs_bytes=$(stat -c %s "$rootfs")
echo "$digest" >"$OUT/digest"
echo "$REVISION" >"$OUT/revision"
printf 'image %s:%s manifest %s\n' "$OUT/oci" "$TAG" "$digest"
printf 'size: %.1f MB compressed (OCI layout), %.1f MB unpacked\n' \
  "$(echo "$layer_bytes / 1000000" | bc -l)" "$(echo "$rootfs_bytes / 1000000" | bc -l)"
printf 'build time: %.1f s\n' "$(echo "$(date +%s.%N) - $start" | bc -l)"
