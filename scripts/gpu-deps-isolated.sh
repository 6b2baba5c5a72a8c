#!/usr/bin/env bash
# Runs a command as if on the device tool's bare GPU image: in a private mount namespace
# (unshare -m, root) where this machine's copies of the engine's libraries are hidden (spdlog,
# fmt, nlohmann-json, doctest, xxhash, OpenBLAS/BLAS/LAPACK, gfortran, quadmath, LMDB, Boost,
# their CMake and pkg-config files; pkg-config itself is covered by /dev/null). Nothing outside the namespace changes.
#
#   bash scripts/gpu-deps-isolated.sh bash scripts/gpu-check.sh    # the check as it runs there
#   bash scripts/gpu-deps-isolated.sh ls /usr/include/spdlog        # fails: hidden
#
# Each listed system folder is covered by a folder of links to its entries, less the hidden
# ones (the original stays reachable under /tmp/cedar-iso-*/ for the links); so a build that
# still finds a hidden header or library fails instead of silently using it.
set -euo pipefail
if [[ ${CEDAR_ISO_INNER:-} != 1 ]]; then
  [[ $(id -u) == 0 ]] || { echo "gpu-deps-isolated: needs root (unshare -m)" >&2; exit 2; }
  exec env CEDAR_ISO_INNER=1 unshare -m --propagation private bash "$0" "$@"
fi
iso=$(mktemp -d /tmp/cedar-iso-XXXXXX)
mount -t tmpfs tmpfs "$iso"

hide() {  # hide DIR PATTERN...: cover DIR with links to its entries except those matching a PATTERN
  local dir name pat keep n=0
  dir=$(realpath "$1"); shift
  local key=${dir//\//_}
  mkdir -p "$iso/orig$key" "$iso/farm$key"
  mount --rbind "$dir" "$iso/orig$key"
  shopt -s nullglob dotglob
  for e in "$iso/orig$key"/*; do
    name=${e##*/}
    keep=1
    for pat in "$@"; do
      # shellcheck disable=SC2053
      [[ $name == $pat ]] && { keep=0; break; }
    done
    if (( keep )); then ln -s "$e" "$iso/farm$key/$name"; else n=$((n + 1)); fi
  done
  shopt -u nullglob dotglob
  mount --bind "$iso/farm$key" "$dir"
  echo "gpu-deps-isolated: $dir: $n entries hidden" >&2
}

hide /usr/include spdlog fmt nlohmann doctest 'xxhash.h' 'xxh3.h' 'xxh_x86dispatch.h' 'lmdb.h' boost \
  'cblas*' 'f77blas.h' 'openblas*' 'lapack*'
hide /usr/include/x86_64-linux-gnu 'cblas*' 'f77blas.h' 'openblas*' 'lapack*'
hide /usr/lib/x86_64-linux-gnu/cmake spdlog fmt openblas 'Boost*' 'boost*' 'Boost*'
hide /usr/lib/x86_64-linux-gnu/pkgconfig 'spdlog.pc' 'fmt.pc' 'libxxhash.pc' 'lmdb.pc' 'blas*' 'lapack*' 'openblas*'
hide /usr/lib/cmake doctest
hide /usr/share/cmake nlohmann_json
hide /usr/share/pkgconfig 'nlohmann_json.pc'
# Not /usr/bin as a whole: gcc and cmake find their own files from their executables' real paths.
for p in pkg-config pkgconf x86_64-linux-gnu-pkg-config x86_64-linux-gnu-pkgconf; do
  [[ -e /usr/bin/$p ]] && mount --bind /dev/null "$(realpath "/usr/bin/$p")"
done
# Last, so the folders above (under it) are covered first and reached through its links.
hide /usr/lib/x86_64-linux-gnu 'libspdlog*' 'libfmt*' 'libxxhash*' 'libopenblas*' 'openblas-*' \
  'libblas*' 'liblapack*' 'libcblas*' 'libgfortran*' 'libquadmath*' 'liblmdb*' 'libboost*' 'blas' 'lapack'
exec "$@"
