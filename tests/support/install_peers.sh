#!/usr/bin/env bash
# Install the Python Vulkan packages vkcore is compared with (`vkcore bench --peers`,
# docs/performance.md#against-the-other-python-vulkan-packages) into a virtual environment
# of their own: Kompute's kp 0.9.0 needs numpy < 2, which vkcore's environment must not get.
#
# usage: tests/support/install_peers.sh [DEST]      (default DEST: .venv-peers)
#
# wgpu and vkdispatch are wheels from PyPI. kp is built from its PyPI sdist (its hash is
# pinned below) against Debian's fmt, pybind11 and Vulkan headers, which the sdist would
# otherwise fetch from GitHub; its setup.py lacks a comma that glues two cmake flags
# together, so one is added before the build. A peer that cannot be installed leaves
# DEST/failed/PEER.txt, one line saying why (its log beside it), and the others are still
# installed: the comparison names the missing one and the reason. Once all three are in,
# DEST/.peers-installed holds the pins and a second run does nothing; a failed peer is
# tried again on the next run. Exit status 1 only when DEST itself cannot be made.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="${1:-$REPO/.venv-peers}"
PYTHON="${PYTHON:-python3}"
# kp's build needs these; the Makefile's `system` target installs the Vulkan driver itself.
APT_PACKAGES=(libfmt-dev libspdlog-dev pybind11-dev libvulkan-dev python3-dev build-essential cmake)
# numpy < 2: kp 0.9.0 declares it, and Debian 12's pybind11 (2.10) predates numpy 2.
BASE=("numpy<2" setuptools wheel)
WHEELS=(wgpu==0.32.0 vkdispatch==0.1.0)
KP_VERSION=0.9.0
KP_SHA256=98e583dc6e9731ff6d7a3e3317817e4d93f7b2945929619e29a56325db279949
PINS="${BASE[*]} ${WHEELS[*]} kp==$KP_VERSION sha256:$KP_SHA256"
STAMP="$DEST/.peers-installed"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ]; then
  echo "peers already installed in $DEST (remove it to reinstall)"
  exit 0
fi

# Debian packages, only those missing (as the Makefile's `system` target does); a failure
# here is kp's, reported by its build, not the others'.
install_apt_packages() {
  local missing=() p sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" \
    || echo "install_peers: apt-get install ${missing[*]} failed; kp will not build" >&2
}

# One line for the comparison's table: the step, the log's last error line, the log.
record_failure() {
  local peer="$1" step="$2" log="$3" reason
  reason="$(grep -iE 'error' "$log" | grep -v '^\[notice\]' | tail -n 1 | cut -c1-200 || true)"
  [ -n "$reason" ] || reason="$(tail -n 1 "$log" | cut -c1-200)"
  echo "$step failed: ${reason:-no output} (log: $log)" > "$DEST/failed/$peer.txt"
  echo "install_peers: $peer: $(cat "$DEST/failed/$peer.txt")" >&2
}

# Whether DEST's python imports the package at the given version.
has_version() {
  "$PY" -c 'import importlib, importlib.metadata as m, sys
importlib.import_module(sys.argv[1])
sys.exit(m.version(sys.argv[1]) != sys.argv[2])' "$1" "$2" >/dev/null 2>&1
}

install_wheel() {
  local spec="$1" peer="${1%%==*}" log="$DEST/failed/${1%%==*}.log"
  if "$PY" -m pip install -q "$spec" >"$log" 2>&1 && has_version "$peer" "${spec##*==}"; then
    rm -f "$DEST/failed/$peer.txt" "$log"
  else
    record_failure "$peer" "pip install $spec" "$log"
  fi
}

# kp's setup.py passes '-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON' '-DPYTHON_EXECUTABLE=...'
# without a comma between them, so cmake gets neither flag; fixed only where it is exactly so.
fix_kp_setup() {
  "$PY" - "$1/setup.py" <<'PY'
import pathlib
import sys

path = pathlib.Path(sys.argv[1])
text = path.read_text()
flag = "'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON'"
if text.count(flag + "\n") != 1:
    sys.exit(f"{path}: the flag without its comma is not there once")
path.write_text(text.replace(flag + "\n", flag + ",\n"))
PY
}

# Every kompute_option of kp's CMakeLists.txt reads an environment variable of its name
# (setup.py ignores CMAKE_ARGS): the system's headers and libraries, no install rules
# (which fail on Debian's pybind11 target), no version check (the headers are newer than
# lavapipe). setup.py appends the thread count character by character: one digit at most.
build_kp() {
  local log="$DEST/failed/kp.log" work threads
  if has_version kp "$KP_VERSION"; then
    rm -f "$DEST/failed/kp.txt"
    return 0
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/vkcore-kp.XXXXXX")"
  echo "kp==$KP_VERSION --hash=sha256:$KP_SHA256" > "$work/requirements.txt"
  if ! "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      --require-hashes -r "$work/requirements.txt" -d "$work" >"$log" 2>&1; then
    record_failure kp "pip download kp==$KP_VERSION" "$log"
  elif ! tar xzf "$work/kp-$KP_VERSION.tar.gz" -C "$work" >>"$log" 2>&1 \
      || ! fix_kp_setup "$work/kp-$KP_VERSION" >>"$log" 2>&1; then
    record_failure kp "unpacking and fixing kp's setup.py" "$log"
  else
    threads="$(nproc 2>/dev/null || echo 1)"
    echo "building kp $KP_VERSION from its sdist (about a minute)"
    if env KOMPUTE_OPT_INSTALL=OFF \
        KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
        KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
        KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
        KOMPUTE_OPT_USE_BUILT_IN_SPDLOG=OFF \
        KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
        KOMPUTE_PYTHON_NUM_PARALLEL_THREADS=$(( threads > 9 ? 9 : threads )) \
        "$PY" -m pip install -v --no-build-isolation "$work/kp-$KP_VERSION" >>"$log" 2>&1 \
        && has_version kp "$KP_VERSION"; then
      rm -f "$DEST/failed/kp.txt" "$log"
    else
      record_failure kp "building kp $KP_VERSION" "$log"
    fi
  fi
  rm -rf "$work"
}

install_apt_packages
[ -x "$DEST/bin/python" ] || "$PYTHON" -m venv "$DEST"
PY="$DEST/bin/python"
mkdir -p "$DEST/failed"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "${BASE[@]}"
for spec in "${WHEELS[@]}"; do
  install_wheel "$spec"
done
build_kp
if compgen -G "$DEST/failed/*.txt" >/dev/null; then
  rm -f "$STAMP"
  echo "peers installed in $DEST, except: $(cd "$DEST/failed" && ls -- *.txt | sed 's/\.txt$//' | tr '\n' ' ')"
else
  rmdir "$DEST/failed" 2>/dev/null || true
  echo "$PINS" > "$STAMP"
  echo "peers installed in $DEST: ${WHEELS[*]} kp==$KP_VERSION"
fi
