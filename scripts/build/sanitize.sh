#!/usr/bin/env bash
# Builds the tests of every file reader keel has, and the fuzzer, with
# AddressSanitizer and UndefinedBehaviorSanitizer (in build-asan/, beside the
# normal build) and runs them: an out-of-bounds read or undefined behaviour
# that a hostile file triggers fails here even where it would not crash.
# scripts/test.sh calls it after the normal build, whose LibTorch code
# (libkeel_core.a, uninstrumented), binary and the keel_base files these
# programs never link (the sweep runner and reports, replay: see
# KEEL_BASE_UNSANITIZED) it reuses: instrumented are the rest of keel_base
# (every text, JSON, YAML, shard, tokenizer and sweep-spec reader), the
# tensor files that read files (safetensors, checkpoint state; see
# KEEL_TENSOR_READERS in cmake/keel_sources.cmake) and the test programs.
# Without a normal build it instruments everything (slower). It builds only
# what it runs. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${KEEL_SANITIZE_DIR:-build-asan}
tests=(test_fuzz test_corpus_reader test_bpe_tokenizer test_safetensors test_checkpoint_store test_config test_sweep_spec)
say() { echo "[sanitize] $*"; }
# Two test processes run at once: OpenMP threads wait passively instead of
# spinning on the other's core (as tests/CMakeLists.txt sets for CTest).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
main=$(realpath -m "${KEEL_BUILD_DIR:-build}")
reuse=()
if [ -f "$main/libkeel_core.a" ] && [ -f "$main/libkeel_base.a" ] && [ -x "$main/keel" ]; then
  reuse=(-DKEEL_REUSE_CORE="$main")
fi
# The normal build's compiler (Clang where scripts/setup.sh found it): its
# library is linked in, and one compiler's sanitizer runtime serves both.
compiler=()
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$main/CMakeCache.txt" 2>/dev/null || true)
[ -n "$cxx" ] && compiler=(-DCMAKE_CXX_COMPILER="$cxx")
if [ ! -f "$dir/build.ninja" ]; then
  say "configuring $dir (ASan + UBSan, -O1${reuse:+; LibTorch code and binary from $main})"
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DKEEL_SANITIZE=address,undefined -DKEEL_PARQUET=OFF -DKEEL_TEST_OPT= "${reuse[@]}" "${compiler[@]}" ${CMAKE_ARGS:-} > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
fi
start=$(date +%s)
say "building ${tests[*]} ($(nproc) jobs)"
cmake --build "$dir" -j "${KEEL_JOBS:-$(nproc)}" --target "${tests[@]}"
say "built in $(( $(date +%s) - start )) s"
# Leaks: LibTorch keeps allocations until exit by design. Container
# overflow: its annotations are false positives when uninstrumented
# libraries (LibTorch) resize the same std::vector.
export ASAN_OPTIONS=detect_leaks=0:detect_container_overflow=0:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The fuzzer's cases take 1-40 s each under ASan: they run one process per
# case, $(nproc) at a time, taking the next case as a core frees (static
# gtest shards put its two longest on one core: 92 s on two cores where the
# cases sum to 123 s). The other programs' cases take milliseconds: each
# program runs as ${shards} gtest shards at once (GTEST_TOTAL_SHARDS).
shards=${KEEL_SANITIZE_SHARDS:-$(nproc)}
per_case=(test_fuzz)
# run_one LOG_PREFIX JOB COMMAND...: COMMAND's output into LOG_PREFIX.JOB.log;
# a failure appends "[sanitize] exit N", so that only failing logs are shown.
run_one='log="$1.$2.log"; shift 2; "$@" --gtest_brief=1 > "$log" 2>&1 || { echo "[sanitize] exit $?" >> "$log"; exit 1; }'
failed=0
for t in "${tests[@]}"; do
  start=$(date +%s)
  rm -f "$dir/$t".*.log
  ok=1
  if [[ " ${per_case[*]} " == *" $t "* ]]; then
    cases=$("$dir/tests/$t" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
    echo "$cases" | xargs -P "$shards" -I{} sh -c "$run_one" _ "$dir/$t" {} "$dir/tests/$t" --gtest_filter={} || ok=0
    how="$(echo "$cases" | wc -l) cases, $shards at a time"
  else
    seq 0 $((shards - 1)) | xargs -P "$shards" -I{} sh -c "$run_one" _ "$dir/$t" {} \
      env GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX={} "$dir/tests/$t" || ok=0
    how="$shards shards"
  fi
  if [ "$ok" = 1 ]; then
    say "$t: passed ($(( $(date +%s) - start )) s, $how)"
  else
    say "$t: FAILED; the failing processes' output:"
    for log in "$dir/$t".*.log; do
      if grep -q '^\[sanitize\] exit' "$log"; then echo "--- $log"; tail -n 60 "$log"; fi
    done
    failed=1
  fi
done
exit $failed
