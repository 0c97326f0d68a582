#!/usr/bin/env bash
# Does a CPU training run survive signals that keel does not route? keel
# takes SIGINT and SIGTERM on a thread of its own (src/util/stop_signal.h),
# because the oneDNN inside LibTorch (3.10 in PyTorch 2.11) moves the stack
# pointer into the heap inside its JIT GEMM kernels and a signal frame there
# corrupts the heap. Other signals (a sampling profiler's SIGPROF, a
# debugger's) still land on any thread. This script stands in for them: it
# preloads a no-op SIGUSR1 handler into `keel train` and sends SIGUSR1 every
# US microseconds while the run trains STEPS steps, RUNS times.
#   scripts/stress/signal_stress.sh [CONFIG]   (default configs/bench-cpu-tiny.yaml)
# Environment: KEEL (default build/keel), RUNS (5), STEPS (150), US (200),
# OUT (default runs/stress/signals); anything else keel reads passes through,
# e.g. KEEL_CPU_LINEAR=aten to keep the linears off oneDNN's GEMM.
# Prints each run's exit code; exits 0 when every run ended with keel's 0,
# 1 when one did not (a crash: 134 for glibc's abort, 139 for SIGSEGV), 2 on
# bad usage. Needs a C compiler (cc) for the handler and the sender.
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-configs/bench-cpu-tiny.yaml}
keel=${KEEL:-build/keel}
runs=${RUNS:-5}
steps=${STEPS:-150}
us=${US:-200}
out=${OUT:-runs/stress/signals}
[[ -f $config ]] || { echo "signal_stress: no config at $config" >&2; exit 2; }
[[ -x $keel ]] || { echo "signal_stress: no keel binary at $keel (set KEEL=...)" >&2; exit 2; }
for v in "$runs" "$steps" "$us"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "signal_stress: RUNS, STEPS and US must be positive integers" >&2; exit 2; }
done
command -v cc > /dev/null || { echo "signal_stress: needs a C compiler (cc)" >&2; exit 2; }

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
cat > "$tools/handler.c" <<'EOF'
#include <signal.h>
#include <string.h>
static void ignore(int sig) { (void)sig; }
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = ignore;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, 0);
}
EOF
cat > "$tools/sender.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char** argv) {  /* sender PID US: SIGUSR1 every US microseconds while PID exists */
  const pid_t pid = atoi(argv[1]);
  const int us = atoi(argv[2]);
  long sent = 0;
  while (kill(pid, SIGUSR1) == 0) { ++sent; usleep(us); }
  printf("%ld\n", sent);
  return 0;
}
EOF
cc -O2 -shared -fPIC -o "$tools/handler.so" "$tools/handler.c"
cc -O2 -o "$tools/sender" "$tools/sender.c"

mkdir -p "$out"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)
echo "signal_stress: $config, $runs runs of $steps steps, SIGUSR1 every $us us;$cpu"
failed=0
for i in $(seq 1 "$runs"); do
  log="$out/run-$i.log"
  rm -rf "${out:?}/run-$i"  # this script's own run: a stale metrics.jsonl would start the signals too early
  LD_PRELOAD="$tools/handler.so" "$keel" train "$config" --stop-after-step "$steps" \
    --set run.out_dir="$out" --set run.name="run-$i" > "$log" 2>&1 &
  pid=$!
  # From the first step on: start-up (data preparation included) is not what is tested.
  while kill -0 "$pid" 2> /dev/null && ! grep -q '"step"' "$out/run-$i/metrics.jsonl" 2> /dev/null; do sleep 0.05; done
  "$tools/sender" "$pid" "$us" > "$tools/sent" &
  sender=$!
  rc=0
  wait "$pid" || rc=$?  # reaped: the sender's next kill fails and it ends
  wait "$sender"
  if [[ $rc -eq 0 ]]; then
    echo "  run $i: exit 0 after $(cat "$tools/sent") signals"
  else
    failed=$((failed + 1))
    why=$(tail -n 1 "$log" | grep -v '^[0-9][0-9]:[0-9][0-9]:' || true)  # glibc's last word, not a log line
    [[ $rc -gt 128 ]] && why="SIG$(kill -l $((rc - 128)))${why:+: $why}"
    echo "  run $i: exit $rc after $(cat "$tools/sent") signals: ${why:-see $log}"
  fi
done
echo "signal_stress: $failed of $runs runs failed"
[[ $failed -eq 0 ]]
