#!/usr/bin/env bash
# Packs keel's non-LibTorch dependencies (yaml-cpp, spdlog, fmt, sentencepiece,
# CLI11, nlohmann-json, GoogleTest, zlib, zstd, PCRE2, utf8proc, Gloo's
# headers: headers, libraries, CMake configs) from this machine's Debian
# packages into one folder, usable as a CMake prefix on a machine without
# internet (an air-gapped cluster, the GPU box):
#
#   scripts/build/pack_offline_deps.sh [OUT]          # default OUT: offline-deps (git-ignored)
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=$PWD/offline-deps -DKEEL_TORCH_PYTHON=/opt/torch/.venv/bin/python
#   LD_LIBRARY_PATH=$PWD/offline-deps/lib/x86_64-linux-gnu build/keel ...   # per command, not exported:
#                                                 # exported, it also reaches Python and its torch
#
# Every symbolic link in OUT resolves inside OUT: a link packed without its
# target (a -dev package's libfoo.so whose libfoo.so.N is in a runtime
# package not listed, or an absolute link such as zlib1g-dev's
# /usr/lib/x86_64-linux-gnu/libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13,
# which resolves here but dangles on any other machine) gets its target
# packed from this machine; the script fails naming any link it cannot fix.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-offline-deps}
pkgs=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
      libsentencepiece-dev libsentencepiece0 libcli11-dev nlohmann-json3-dev
      libgtest-dev googletest zlib1g-dev zlib1g libzstd-dev libzstd1
      libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libgloo-dev)
bash scripts/setup.sh --no-build > /dev/null   # makes sure the packages are installed
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
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

# Links: absolute ones become relative links to the re-rooted target; a link
# whose target was not packed gets that target copied from this machine
# (/usr/X for $out/X: Debian's /lib is /usr/lib). Chains take a few passes.
reroot() { local r=${1#/usr/}; printf '%s\n' "$out/${r#/}"; }
for _ in 1 2 3 4; do   # passes
  changed=""
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ $target == /* ]]; then
      ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$(reroot "$target")")" "$link"
      changed=1
    fi
    if [[ ! -e $link ]]; then
      want=$(realpath -m "$link")           # where the link points, inside $out
      here=/usr/${want#"$out"/}             # the same file on this machine
      if [[ $want == "$out"/* && -f $here ]]; then
        mkdir -p "$(dirname "$want")"
        cp -L "$here" "$want"
        changed=1
      fi
    fi
  done < <(find "$out" -type l)
  [[ -z $changed ]] && break
done
dangling=$(find "$out" -xtype l; find "$out" -type l -lname '/*')
if [[ -n $dangling ]]; then
  echo "pack_offline_deps: links that do not resolve inside $out (their targets are not on this machine):" >&2
  while IFS= read -r l; do echo "  ${l#"$out"/} -> $(readlink "$l")" >&2; done <<< "$dangling"
  exit 1
fi
# pkg-config files name /usr; make them relative to where they now are.
find "$out" -name '*.pc' -exec sed -i 's|^prefix=.*|prefix=${pcfiledir}/../../..|' {} +
echo "packed $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1), into $out"
