#!/usr/bin/env bash
# Sets up a fresh Debian machine for keel and builds it. Idempotent: a second
# run installs nothing and does an incremental build.
#
#   scripts/setup.sh            install what is missing, configure, build
#   scripts/setup.sh --no-build only install
#
# Environment: KEEL_BUILD_DIR (default build), KEEL_PYTHON (python3 used to
# create .venv), CMAKE_ARGS (extra configure arguments, e.g.
# -DCMAKE_PREFIX_PATH=/path/to/libtorch), KEEL_BUILD_TARGET (default keel:
# the binary alone; "all" also builds the test programs, as scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build_dir=${KEEL_BUILD_DIR:-build}
start=$(date +%s)
say() { printf '[setup %4ds] %s\n' "$(( $(date +%s) - start ))" "$*"; }

# 1. Debian packages.
debs=(build-essential clang cmake ninja-build pkg-config git python3-venv zlib1g-dev
      libzstd-dev zstd libpcre2-dev libutf8proc-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libsentencepiece-dev sentencepiece
      libcli11-dev nlohmann-json3-dev libgtest-dev libgloo-dev)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  say "installing Debian packages (about a minute): ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all present"
fi

# 2. Python environment with the pinned PyTorch wheel (its LibTorch is what we link).
py=${KEEL_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($py --version 2>&1)"
  "$py" -m venv .venv
fi
# The first command needs requirements.txt; scripts/test.sh asks for
# requirements-test.txt (KEEL_REQUIREMENTS), which adds the test packages.
req=${KEEL_REQUIREMENTS:-scripts/build/requirements.txt}
# A test install also adds requirements-test-nodeps.txt without dependencies.
nodeps=""
[ "$req" = scripts/build/requirements-test.txt ] && nodeps=scripts/build/requirements-test-nodeps.txt
req_hash=$(cat "$req" scripts/build/requirements.txt $nodeps | sha256sum | cut -c1-16)
if [ "$(cat .venv/.keel-requirements 2>/dev/null)" != "$req_hash" ]; then
  if .venv/bin/python -c "import torch" 2>/dev/null; then
    say "installing Python packages from $req (PyTorch is already there: a minute or less)"
  else
    say "installing Python packages from $req: the PyTorch wheel and its CUDA libraries are about 5 GB" \
        "(the long part of the first run: under a minute to 6 minutes, by the link)"
  fi
  # The same pinned packages through uv (PyPI's `uv`, pinned here), which
  # downloads in parallel and links from its cache: on the Zen 3 VM the 5 GB
  # took 25 s with its cache cold and 2 s warm, against 103 s for pip.
  # Where uv cannot be installed or fails (a mirror only pip's own config
  # names, say), pip installs them; KEEL_PIP=1 asks for pip. pip runs with
  # --no-compile: byte-compiling every module of every package was 25 s of
  # its 128 s; Python compiles the few it imports on first use (0.6 s more).
  installed=""
  if [ "${KEEL_PIP:-0}" != 1 ] && .venv/bin/pip install --quiet --disable-pip-version-check uv==0.13.9 > /dev/null 2>&1; then
    uv_args=(--quiet --python .venv/bin/python)
    [ -n "${PIP_INDEX_URL:-}" ] && uv_args+=(--index-url "$PIP_INDEX_URL")
    for u in ${PIP_EXTRA_INDEX_URL:-}; do uv_args+=(--extra-index-url "$u"); done
    for d in ${PIP_FIND_LINKS:-}; do uv_args+=(--find-links "$d"); done
    if .venv/bin/uv pip install "${uv_args[@]}" -r "$req" &&
       { [ -z "$nodeps" ] || .venv/bin/uv pip install "${uv_args[@]}" --no-deps -r "$nodeps"; }; then
      installed=uv
    else
      say "uv could not install them: pip instead"
    fi
  fi
  if [ -z "$installed" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check --no-compile -r "$req"
    if [ -n "$nodeps" ]; then .venv/bin/pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$nodeps"; fi
  fi
  echo "$req_hash" > .venv/.keel-requirements
else
  say "Python packages: up to date"
fi

[ "${1:-}" = "--no-build" ] && exit 0

# 3. Configure (once) and build. The compiler is Clang unless one is chosen
# (CXX=g++, or CMAKE_CXX_COMPILER in CMAKE_ARGS): every LibTorch file
# includes torch/torch.h as a precompiled header, and GCC instantiates its
# templates again in each file (12-14 s per file on a Zen 3, an empty one
# included), Clang once, in the header (-fpch-instantiate-templates): the
# whole build takes half the time (docs/building.md).
compiler=()
if [ -z "${CXX:-}" ] && [[ "${CMAKE_ARGS:-}" != *CMAKE_CXX_COMPILER* ]] && command -v clang++ > /dev/null; then
  compiler=(-DCMAKE_CXX_COMPILER=clang++)
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  say "configuring $build_dir"
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler[@]}" ${CMAKE_ARGS:-}
fi
jobs=${KEEL_JOBS:-$(nproc)}
target=${KEEL_BUILD_TARGET:-keel}
case $target in
  keel) estimate="3-6 minutes on 2 cores the first time, seconds after" ;;
  *) estimate="6-11 minutes on 2 cores the first time (the test programs too)" ;;
esac
say "building $target with $jobs jobs ($estimate)"
cmake --build "$build_dir" -j "$jobs" --target "$target"
say "done: $root/$build_dir/keel"
