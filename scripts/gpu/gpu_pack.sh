#!/usr/bin/env bash
# Builds, on this (development) machine, what scripts/gpu/gpu_check.sh runs on
# the lent GPU machine, and packs it into the git-ignored folder gpu-carry/,
# which the `run` call carries (carry: ["gpu-carry"]); docs/gpu.md.
#
#   bash scripts/gpu/gpu_pack.sh
#
# gpu-carry/
#   bin/keel, bin/test_cuda  build/box/{keel,test_cuda}: keel without Parquet (the box has no
#                            pyarrow), against the pinned LibTorch in .venv, which the box's torch
#                            matches (2.11, CUDA 13); stripped
#   lib/                     the shared libraries they need besides LibTorch/CUDA (the box's torch
#                            has those), glibc and libstdc++/libgcc (the box's own): yaml-cpp,
#                            sentencepiece, spdlog, fmt, zstd, zlib, PCRE2, utf8proc and what
#                            these need, each under its soname
#   prefix/                  scripts/build/pack_offline_deps.sh's headers and libraries: what the
#                            check needs to rebuild keel on the box if these binaries cannot run there
#   MANIFEST.txt             commit, date, glibc, the libraries and where they came from
# The check runs keel with LD_LIBRARY_PATH = lib/ + the box torch's lib
# folders, for keel alone. A call carries at most 64 MiB: this folder and
# the working tree that travels with it (tracked files and untracked ones git
# does not ignore), which alone is about 30 MiB. The script adds the two and
# fails when they leave less than 2 MiB of the 64.
#
# Environment: KEEL_BUILD_DIR (default build), GPU_PACK_NO_BUILD=1 (pack the
# binaries already in $KEEL_BUILD_DIR/box, build nothing).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${KEEL_BUILD_DIR:-build}
box=$build/box
out=gpu-carry
limit_mib=64   # what one call carries: this folder and the working tree together
margin_mib=2
py=.venv/bin/python
say() { printf '[gpu_pack] %s\n' "$*"; }

# 1. The binaries. The only build the GPU check needs, and it happens here.
if [[ -z ${GPU_PACK_NO_BUILD:-} ]]; then
  say "building keel_box and test_cuda_box in $build"
  cmake --build "$build" --target keel_box test_cuda_box
fi
for b in keel test_cuda; do
  [[ -x $box/$b ]] || { echo "gpu_pack: $box/$b is missing (cmake --build $build --target keel_box test_cuda_box)" >&2; exit 1; }
done
# A keel with Parquet would need Arrow's libraries, which the box lacks.
if ldd "$box/keel" | grep -Eq 'lib(arrow|parquet)\.so'; then
  echo "gpu_pack: $box/keel links Arrow/Parquet; the box build must be configured without it" >&2
  exit 1
fi

# 2. The packed headers and libraries (the fallback build's CMake prefix).
bash scripts/build/pack_offline_deps.sh offline-deps

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in keel test_cuda; do strip --strip-unneeded -o "$out/bin/$b" "$box/$b"; done

# 3. The libraries: the NEEDED entries of the binaries, then of each library
# carried, resolved as this machine's loader resolves them (ldd), except
#  - glibc, libstdc++, libgcc_s: the box's own (a newer glibc/libstdc++ runs
#    older programs; an older one fails keel --version, and the check rebuilds);
#  - what LibTorch and its CUDA wheels provide (site-packages/torch,
#    site-packages/nvidia) and CUDA's own libraries: the box's torch is the
#    same version and brings them.
torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_dir")
declare -A where=()
while read -r name arrow path _; do
  [[ $arrow == "=>" ]] || continue
  if [[ $path != /* ]]; then echo "gpu_pack: ldd cannot find $name" >&2; exit 1; fi
  where[$name]=$path
done < <(ldd "$box/keel" "$box/test_cuda")
system='^(ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libutil|libresolv|libanl|libmvec|libstdc\+\+|libgcc_s)\.so'
# CUDA's libraries, wherever this machine resolves them (here libcudart.so.13
# comes from /usr/local/cuda): the box has its own, matching its driver, in
# its torch's nvidia/ wheels, which the check's wrapper puts on the path.
cuda='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z.-]*|nvJitLink|cupti|cufft|cufile|curand|cusolver|cusparse|cusparseLt|nvToolsExt|nvtx3interop|nvshmem[a-z_]*)\.so'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
queue=("$box/keel" "$box/test_cuda")
declare -A seen=()
manifest=()
while (( ${#queue[@]} )); do
  file=${queue[0]}
  queue=("${queue[@]:1}")
  for name in $(needed "$file"); do
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    [[ $name =~ $system ]] && continue
    path=${where[$name]:-}
    [[ -n $path ]] || { echo "gpu_pack: no path for $name (needed by $file)" >&2; exit 1; }
    [[ $path == "$site"/* || $name =~ $cuda ]] && continue   # LibTorch / CUDA: the box's torch
    cp -L "$path" "$out/lib/$name"
    manifest+=("$name <- $(readlink -f "$path")")
    queue+=("$path")
  done
done
for want in libyaml-cpp libsentencepiece libzstd libpcre2-8 libutf8proc libspdlog libfmt libz.so; do
  compgen -G "$out/lib/$want*" > /dev/null || say "note: no $want carried (not a NEEDED entry: linked statically?)"
done

# 4. The fallback build's prefix (relative links only: pack_offline_deps.sh checks).
cp -a offline-deps "$out/prefix"

{
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) at commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (working tree modified)') on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -n 1)"
  echo "torch $("$py" -c 'import torch; print(torch.__version__)') (LibTorch linked: $torch_dir)"
  echo "libraries in lib/:"
  printf '  %s\n' "${manifest[@]}"
} > "$out/MANIFEST.txt"

size_kib=$(du -sk "$out" | cut -f1)
# What travels besides: the tracked files and the untracked ones git does not ignore (apparent sizes).
tree_kib=$(( $(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -n 1 | cut -f1) / 1024 ))
total_kib=$((size_kib + tree_kib))
say "$out: $(ls "$out/lib" | wc -l) libraries; bin $(du -sh "$out/bin" | cut -f1), lib $(du -sh "$out/lib" | cut -f1), prefix $(du -sh "$out/prefix" | cut -f1); $((size_kib / 1024)) MiB + the working tree's $((tree_kib / 1024)) MiB = $((total_kib / 1024)) MiB of the $limit_mib MiB a call carries"
if (( total_kib > (limit_mib - margin_mib) * 1024 )); then
  echo "gpu_pack: $out ($((size_kib / 1024)) MiB) and the working tree ($((tree_kib / 1024)) MiB) make $((total_kib / 1024)) MiB," \
       "over the $((limit_mib - margin_mib)) MiB a call can carry with room to spare (limit $limit_mib MiB)" >&2
  exit 1
fi
git check-ignore -q "$out" || say "WARNING: $out/ is not git-ignored: add /gpu-carry/ to .gitignore"
say "done: run the check with carry [\"$out\"] (docs/gpu.md)"
