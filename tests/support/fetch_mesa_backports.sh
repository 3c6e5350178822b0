#!/usr/bin/env bash
# Unpack Mesa's lavapipe from Debian bookworm-backports into a private folder, without
# touching the system's Mesa or apt configuration, for the driver-upgrade test of the
# pipeline cache (tests/caches/test_pipeline_cache.py).
#
# usage: tests/support/fetch_mesa_backports.sh [DEST]      (default DEST: .venv/mesa25)
#
# Afterwards DEST holds usr/lib/... (the driver and the newer libdrm it needs) and
# lvp_icd.json, whose library_path is absolute. Select the driver with
#   VK_ICD_FILENAMES=DEST/lvp_icd.json LD_LIBRARY_PATH=DEST/usr/lib/x86_64-linux-gnu
# A second run finds DEST/.complete and does nothing. Exit status 0 on success; on
# failure the last line of stderr says why (the test then skips with that reason).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$REPO/.venv/mesa25}"
SUITE="bookworm-backports"
MIRROR="${VKCORE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The lavapipe of mesa-vulkan-drivers 25.x needs libdrm >= 2.4.121; bookworm has 2.4.114.
PACKAGES=(mesa-vulkan-drivers libdrm2)

if [ -f "$DEST/.complete" ]; then
  exit 0
fi
for tool in apt-get dpkg python3; do
  command -v "$tool" >/dev/null || { echo "fetch_mesa_backports: $tool is not installed" >&2; exit 1; }
done
arch="$(dpkg --print-architecture)"
triplet="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$(uname -m)-linux-gnu")"

work="$(mktemp -d "${TMPDIR:-/tmp}/vkcore-mesa-backports.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb $MIRROR $SUITE main" > "$work/sources.list"
# A private apt state: only this suite's index, in the temp folder.
APT=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
     -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Architecture=$arch"
     -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
if ! apt-get "${APT[@]}" -qq update >"$work/update.log" 2>&1; then
  tail -n 3 "$work/update.log" >&2
  echo "fetch_mesa_backports: apt-get update of $SUITE failed (no network to $MIRROR?)" >&2
  exit 1
fi
specs=()
for p in "${PACKAGES[@]}"; do specs+=("$p/$SUITE"); done
if ! (cd "$work/debs" && apt-get "${APT[@]}" -qq download "${specs[@]}") >"$work/download.log" 2>&1; then
  tail -n 3 "$work/download.log" >&2
  echo "fetch_mesa_backports: apt-get download ${specs[*]} failed" >&2
  exit 1
fi

staging="$DEST.partial.$$"
rm -rf "$staging"
mkdir -p "$staging"
for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$staging"
done
libdir="$staging/usr/lib/$triplet"
icd="$(find "$staging/usr/share/vulkan/icd.d" -name 'lvp_icd*.json' | head -n 1)"
if [ ! -f "$libdir/libvulkan_lvp.so" ] || [ -z "$icd" ]; then
  rm -rf "$staging"
  echo "fetch_mesa_backports: the package holds no lavapipe ($libdir/libvulkan_lvp.so)" >&2
  exit 1
fi
final_lib="$DEST/usr/lib/$triplet/libvulkan_lvp.so"
python3 - "$icd" "$staging/lvp_icd.json" "$final_lib" <<'PY'
import json, sys
src, dst, library = sys.argv[1:]
with open(src) as fh:
    manifest = json.load(fh)
manifest["ICD"]["library_path"] = library
with open(dst, "w") as fh:
    json.dump(manifest, fh, indent=4)
PY
missing="$(LD_LIBRARY_PATH="$libdir" ldd "$libdir/libvulkan_lvp.so" | grep 'not found' || true)"
if [ -n "$missing" ]; then
  rm -rf "$staging"
  echo "fetch_mesa_backports: libraries missing for the unpacked lavapipe: $(echo $missing)" >&2
  exit 1
fi
for deb in "$work"/debs/*.deb; do basename "$deb"; done > "$staging/PACKAGES"
touch "$staging/.complete"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$staging" "$DEST"
echo "Mesa from $SUITE unpacked into $DEST"
