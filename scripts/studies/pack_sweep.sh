#!/usr/bin/env bash
# A sweep's results without its checkpoints, as one .tar.zst a commit can
# carry: per point config.yaml, summary.json, metrics.jsonl, spikes.jsonl and
# compute.json, and the sweep's own sweep.json and sweep.log. That is all
# `keel report` reads, and a point with its summary.json counts as finished,
# so a study too long for one machine's session can be run a few points at a
# time (`keel sweep ... --only`), packed, committed, unpacked on the next
# machine and continued there.
#
#   scripts/studies/pack_sweep.sh runs/sweeps/wortsman-cpu docs/results/qknorm-edge-cpu/wortsman/runs.tar.zst
#   scripts/studies/pack_sweep.sh runs/sweeps/wortsman-cpu runs-seed3.tar.zst --only '*_seed=3'
#   scripts/studies/pack_sweep.sh --unpack docs/results/qknorm-edge-cpu/wortsman/runs.tar.zst runs/sweeps
#
# Packing only finished points (--only GLOB: those whose names match, as
# `keel sweep --only` selects them, so each archive holds one batch and
# archives of one sweep unpack side by side); unpacking refuses to replace a point
# directory that already exists (a newer run of it would be lost).
set -euo pipefail

usage() {
  echo "usage: $0 SWEEP_DIR OUT.tar.zst [--only GLOB] | $0 --unpack IN.tar.zst PARENT_DIR" >&2
  exit 2
}

if [[ "${1:-}" == "--unpack" ]]; then
  [[ $# -eq 3 ]] || usage
  archive=$2 parent=$3
  [[ -f "$archive" ]] || { echo "pack_sweep: $archive: no such file" >&2; exit 2; }
  [[ -d "$parent" ]] || { echo "pack_sweep: $parent: not a directory" >&2; exit 2; }
  # Members must stay inside PARENT_DIR: no absolute paths, no '..'.
  members=$(tar -I zstd -tf "$archive") || { echo "pack_sweep: $archive: not a zstd tar archive" >&2; exit 2; }
  if grep -qE '(^/|(^|/)\.\.(/|$))' <<<"$members"; then
    echo "pack_sweep: $archive: a member's path leaves the directory (absolute or '..'); nothing unpacked" >&2
    exit 2
  fi
  clash=""
  while IFS= read -r m; do
    [[ "$m" == */summary.json ]] || continue
    point=$(dirname "$m")
    [[ "$(dirname "$point")" == "." ]] && continue  # the sweep directory itself
    [[ -e "$parent/$point" ]] && clash+="  $parent/$point"$'\n'
  done <<<"$members"
  if [[ -n "$clash" ]]; then
    printf 'pack_sweep: these point directories exist already; move them away first, nothing unpacked:\n%s' "$clash" >&2
    exit 2
  fi
  tar -I zstd -xf "$archive" -C "$parent" --no-same-owner --skip-old-files
  echo "pack_sweep: unpacked $(grep -c '/summary.json$' <<<"$members") point(s) into $parent"
  exit 0
fi

[[ $# -eq 2 || ( $# -eq 4 && "$3" == "--only" ) ]] || usage
sweep=${1%/} out=$2 only=${4:-*}
[[ -f "$sweep/sweep.json" ]] || { echo "pack_sweep: $sweep: no sweep.json (not a keel sweep directory)" >&2; exit 2; }
[[ -e "$out" ]] && { echo "pack_sweep: $out exists; remove it or name another file" >&2; exit 2; }
parent=$(dirname "$sweep") name=$(basename "$sweep")
files=("$name/sweep.json")
[[ -f "$sweep/sweep.log" ]] && files+=("$name/sweep.log")
points=0
for dir in "$sweep"/*/; do
  dir=${dir%/}
  [[ -f "$dir/summary.json" ]] || continue  # running or never started: nothing final to keep
  # shellcheck disable=SC2053  # a glob, on purpose
  [[ "$(basename "$dir")" == $only ]] || continue
  point="$name/$(basename "$dir")"
  for f in config.yaml summary.json metrics.jsonl spikes.jsonl compute.json; do
    [[ -f "$parent/$point/$f" ]] && files+=("$point/$f")
  done
  points=$((points + 1))
done
[[ $points -gt 0 ]] || { echo "pack_sweep: $sweep: no finished point matches '$only'; nothing packed" >&2; exit 2; }
tar -I 'zstd -19 -T0' -cf "$out" -C "$parent" --sort=name --owner=0 --group=0 --mtime='@0' "${files[@]}"
echo "pack_sweep: $points finished point(s) of $sweep -> $out ($(du -h "$out" | cut -f1))"
