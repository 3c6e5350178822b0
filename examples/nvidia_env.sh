# Sourced by the GPU scripts: select NVIDIA's Vulkan driver as NVIDIA's container images lay
# it out (the ICD manifest nvidia_icd.json in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d,
# libvulkan.so.1 from the system), so that lavapipe cannot answer in its place, and pick
# the Python to run (PYTHON, else the repository's .venv, else python3).
# Sets: here, python, icd, VK_DRIVER_FILES, VK_ICD_FILENAMES, VKCORE_DEVICE.

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python="$here/.venv/bin/python"; else python=python3; fi
fi

icd=""
for candidate in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$candidate" ]; then icd="$candidate"; break; fi
done
if [ -z "$icd" ]; then
  echo "$(basename "$0"): no nvidia_icd.json in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d;" >&2
  echo "  in a container, expose the graphics capability (NVIDIA_DRIVER_CAPABILITIES=...,graphics)" >&2
  exit 1
fi
ldconfig_bin="$(command -v ldconfig || echo /sbin/ldconfig)"
if [ -x "$ldconfig_bin" ] && ! "$ldconfig_bin" -p | grep -q 'libvulkan\.so\.1'; then
  echo "$(basename "$0"): the Vulkan loader libvulkan.so.1 is missing (Debian/Ubuntu: apt-get install libvulkan1)" >&2
  exit 1
fi
# VK_DRIVER_FILES is the loader's name since 1.3.207, VK_ICD_FILENAMES the older one.
export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"
export VKCORE_DEVICE="${VKCORE_DEVICE:-nvidia}"
