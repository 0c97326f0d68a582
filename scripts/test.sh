#!/usr/bin/env bash
# Sets up and builds keel, then runs the whole test suite: C++ via CTest, the
# Python parity tests, then the file readers' tests and the fuzzer again
# under AddressSanitizer and UndefinedBehaviorSanitizer (scripts/build/sanitize.sh,
# a second build in build-asan/). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
KEEL_BUILD_TARGET=all KEEL_REQUIREMENTS=scripts/build/requirements-test.txt bash scripts/setup.sh
build_dir=${KEEL_BUILD_DIR:-build}
echo "[test] ctest"
ctest --test-dir "$build_dir" --output-on-failure -j "${KEEL_TEST_JOBS:-2}"
if compgen -G "tests/python/test_*.py" > /dev/null; then
  echo "[test] pytest"
  # A file per worker (--dist loadfile): a module's fixture (the HF parity
  # runs' 40 s of training) is built once, not once per worker.
  .venv/bin/python -m pytest -q -n "${KEEL_TEST_JOBS:-2}" --dist loadfile tests/python
fi
echo "[test] sanitizers: the file readers' tests and the fuzzer under ASan + UBSan"
bash scripts/build/sanitize.sh
