#!/usr/bin/env bash
# The engine's system libraries as Debian packages, for a GPU machine that has none of them and
# cannot download (the device tool's H200 image): scripts/gpu-check.sh builds the engine-only
# configuration (CEDAR_ENGINE_ONLY: kernels, engine, cache, session, CUDA, the gpu tests,
# bench_engine) against them. docs/GPU.md, "How to run the check", says how the two scripts fit together.
#
#   bash scripts/gpu-deps.sh                 # here (Debian, apt): download the .debs into .gpu-deps/
#   bash scripts/gpu-deps.sh --unpack DIR    # there: unpack them under DIR (never /) and check them
#
# Download: `apt-get download` (no install, no root needed beyond apt's lists) of the packages
# below into .gpu-deps/ (old .debs there are removed first), which .git/info/exclude ignores so
# it travels only when a device `run` names it in `carry`; then prints the sizes against the
# device tool's 64 MiB limit on what travels (tracked + untracked-not-ignored files + carried).
# Unpack: `dpkg -x` of each .deb (python3 when dpkg is missing) into DIR; DIR/usr is then the
# prefix for CMAKE_PREFIX_PATH, and DIR/usr/lib/x86_64-linux-gnu{,/openblas-pthread} the
# LD_LIBRARY_PATH for running. GPU_DEPS_DIR overrides .gpu-deps/; GPU_DEPS_NO_DPKG=1 tests the
# python3 unpacker.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=${GPU_DEPS_DIR:-$root/.gpu-deps}

# Debian bookworm names. OpenBLAS: the pthread variant (the one the CPU build uses here), its dev
# package (cblas.h, libopenblas.so) and its runtime's Fortran libraries (the image may lack them).
# spdlog is built against the external fmt (its CMake config asks for fmt). LMDB (100 KB) lets the
# engine-only build add the cache and session layer, so gpu_session_test runs too.
packages=(
  libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  nlohmann-json3-dev
  libxxhash-dev libxxhash0
  doctest-dev
  liblmdb-dev liblmdb0
)

unpack_deb() {  # unpack_deb FILE DIR: the data part of one .deb
  if [[ -z ${GPU_DEPS_NO_DPKG:-} ]] && command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, 'rb').read()
assert data[:8] == b'!<arch>\n', deb
off = 8
while off < len(data):
    name = data[off:off + 16].decode().strip().rstrip('/')
    size = int(data[off + 48:off + 58].decode().strip())
    body = data[off + 60:off + 60 + size]
    off += 60 + size + (size & 1)
    if name.startswith('data.tar'):
        with tarfile.open(fileobj=io.BytesIO(body)) as t:
            t.extractall(dest, filter='tar') if hasattr(tarfile, 'data_filter') else t.extractall(dest)
        break
else:
    sys.exit(f'{deb}: no data.tar member')
EOF
  fi
}

if [[ ${1:-} == --unpack ]]; then
  dest=${2:?usage: gpu-deps.sh --unpack DIR}
  [[ $dest != / && $dest != /usr* ]] || { echo "gpu-deps: refusing to unpack into $dest" >&2; exit 2; }
  shopt -s nullglob
  debs=("$deps"/*.deb)
  (( ${#debs[@]} )) || { echo "gpu-deps: no .deb files in $deps (run scripts/gpu-deps.sh here first)" >&2; exit 2; }
  mkdir -p "$dest"
  for f in "${debs[@]}"; do unpack_deb "$f" "$dest"; done
  lib=$dest/usr/lib/x86_64-linux-gnu
  missing=0
  for f in usr/include/spdlog/spdlog.h usr/include/fmt/format.h usr/include/nlohmann/json.hpp \
           usr/include/doctest/doctest.h usr/include/xxhash.h usr/include/lmdb.h usr/lib/x86_64-linux-gnu/liblmdb.so \
           usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
           usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
           usr/lib/x86_64-linux-gnu/libspdlog.so usr/lib/x86_64-linux-gnu/libfmt.so usr/lib/x86_64-linux-gnu/libxxhash.so \
           usr/lib/x86_64-linux-gnu/libgfortran.so.5 usr/lib/x86_64-linux-gnu/cmake/spdlog/spdlogConfig.cmake \
           usr/lib/x86_64-linux-gnu/cmake/fmt/fmt-config.cmake usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake; do
    [[ -e $dest/$f ]] || { echo "gpu-deps: missing after unpacking: $f" >&2; missing=1; }
  done
  (( missing == 0 )) || exit 2
  echo "gpu-deps: unpacked ${#debs[@]} packages into $dest (prefix $dest/usr, libraries $lib and $lib/openblas-pthread)"
  exit 0
fi

command -v apt-get >/dev/null || { echo "gpu-deps: needs apt-get (a Debian bookworm machine)" >&2; exit 2; }
mkdir -p "$deps"
rm -f "$deps"/*.deb
exclude=$(git -C "$root" rev-parse --git-path info/exclude)
[[ $exclude = /* ]] || exclude=$root/$exclude
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu-deps/' "$exclude" 2>/dev/null || echo '/.gpu-deps/' >>"$exclude"
# As root, apt drops to the _apt user for downloads, who cannot write here: stay root.
apt_opts=(-q -o APT::Sandbox::User=root)
if ! (cd "$deps" && apt-get "${apt_opts[@]}" download "${packages[@]}"); then
  echo "gpu-deps: download failed; refreshing apt's lists once and retrying" >&2
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$deps" && apt-get "${apt_opts[@]}" download "${packages[@]}")
fi

# Check that the set unpacks to what the engine-only build needs (into a temporary folder).
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
GPU_DEPS_DIR=$deps bash "$0" --unpack "$check/p" >/dev/null

ls -l "$deps"
debs_bytes=$(cat "$deps"/*.deb | wc -c)
tree_bytes=$(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -L -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "gpu-deps: ${#packages[@]} packages, $(mib "$debs_bytes") in $deps"
echo "gpu-deps: working tree that travels (tracked + untracked-not-ignored): $(mib "$tree_bytes");" \
     "with .gpu-deps carried: $(mib $((tree_bytes + debs_bytes))) of the device tool's 64 MiB"
if (( tree_bytes + debs_bytes > 60 * 1048576 )); then
  echo "gpu-deps: WARNING: too close to (or over) the 64 MiB limit" >&2
  exit 1
fi
