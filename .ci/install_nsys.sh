#!/usr/bin/env bash
# Install Nsight Systems from Debian's non-free component (2022.4 on bookworm) and apply the
# importer-link quirk (README.md, "Which nsys reads which reports"). Idempotent; needs root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v nsys >/dev/null 2>&1; then
  src=/etc/apt/sources.list.d/debian.sources
  if [ -f "$src" ] && ! grep -q "non-free" "$src"; then
    sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$src"
  elif [ -f /etc/apt/sources.list ] && ! grep -q "non-free" /etc/apt/sources.list; then
    sed -i -E 's/^(deb .* main)$/\1 contrib non-free non-free-firmware/' /etc/apt/sources.list
  fi
  apt-get update -qq
  # --no-install-recommends: nsys needs libcuda1 to install, but not the NVIDIA kernel module (dkms).
  apt-get install -y -qq --no-install-recommends nsight-systems >/dev/null
fi
# nsys looks for its importer under the multiarch folder; Debian ships it elsewhere.
if [ -d /usr/lib/nsight-systems/host-linux-x64 ] && [ ! -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ]; then
  mkdir -p /usr/lib/x86_64-linux-gnu/nsight-systems
  ln -s /usr/lib/nsight-systems/host-linux-x64 /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64
fi
nsys --version
