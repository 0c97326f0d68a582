#!/usr/bin/env bash
# Packs keel's non-LibTorch dependencies (yaml-cpp, spdlog, fmt, sentencepiece,
# CLI11, nlohmann-json, GoogleTest, zlib, zstd, PCRE2, utf8proc: headers, libraries, CMake configs)
# from this machine's Debian packages into one folder, usable as a CMake
# prefix on a machine without internet (an air-gapped cluster, the GPU box):
#
#   scripts/pack_offline_deps.sh [OUT]          # default OUT: offline-deps (git-ignored)
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=$PWD/offline-deps -DKEEL_TORCH_PYTHON=/opt/torch/.venv/bin/python
#   export LD_LIBRARY_PATH=$PWD/offline-deps/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-offline-deps}
pkgs=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
      libsentencepiece-dev libsentencepiece0 libcli11-dev nlohmann-json3-dev
      libgtest-dev googletest zlib1g-dev zlib1g libzstd-dev libzstd1
      libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libgloo-dev)
bash scripts/setup.sh --no-build > /dev/null   # makes sure the packages are installed
rm -rf "$out"
mkdir -p "$out"
# Files and symlinks under /usr, re-rooted at $out (usr/include -> include, ...).
for p in "${pkgs[@]}"; do
  dpkg -L "$p" | while read -r f; do
    case "$f" in
      /usr/share/doc/*|/usr/share/man/*|/usr/src/*) continue ;;
      /usr/*|/lib/*) ;;
      *) continue ;;
    esac
    if [ -f "$f" ] || [ -L "$f" ]; then
      rel=${f#/usr/}
      rel=${rel#/}
      mkdir -p "$out/$(dirname "$rel")"
      cp -a "$f" "$out/$rel"
    fi
  done
done
# pkg-config files name /usr; make them relative to where they now are.
find "$out" -name '*.pc' -exec sed -i 's|^prefix=.*|prefix=${pcfiledir}/../../..|' {} +
echo "packed $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1), into $out"
