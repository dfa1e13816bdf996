#!/usr/bin/env bash
# test.sh: set everything up and run every test DeepInfer has.
#
#   1. scripts/setup.sh          apt packages, the test venv (.venv), test models
#   2. build/                    Release build, C unit tests (CTest)
#   3. build-asan/               ASan + UBSan build, the same unit tests
#   4. tests/e2e/                end-to-end tests (pytest) against build/deepinfer
#   5. build-fuzz/               every libFuzzer target for a bounded time (clang)
#
# Ends with one line "N passed, N failed" and exits non-zero on any failure.
# Options: --quick (skip the ASan build and the fuzzers), --no-setup, -h/--help
# Environment: DI_FUZZ_SECONDS (default 30 per target), JOBS (default 2).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
QUICK=0 SETUP=1
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --no-setup) SETUP=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
JOBS="${JOBS:-2}"
FUZZ_SECONDS="${DI_FUZZ_SECONDS:-30}"
PASSED=0 FAILED=0
say() { printf '\n=== %s\n' "$*"; }
count() { PASSED=$((PASSED + $1)); FAILED=$((FAILED + $2)); }
fail_stage() { echo "FAILED: $*"; FAILED=$((FAILED + 1)); }

if [[ $SETUP == 1 ]]; then
  say "setup"
  scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
fi

# Runs ctest in build dir $1 and adds its counts.
run_ctest() {
  local dir=$1 log
  log="$(mktemp)"
  (cd "$dir" && ctest --output-on-failure -j"$JOBS" 2>&1) | tee "$log"
  local line
  line="$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)"
  if [[ -z $line ]]; then
    fail_stage "ctest in $dir printed no summary"
  else
    local failed total
    failed="$(sed -E 's/.*, ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")"
    total="$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")"
    count $((total - failed)) "$failed"
  fi
  rm -f "$log"
}

build() {
  local dir=$1
  shift
  cmake -S . -B "$dir" "$@" >/dev/null && cmake --build "$dir" -j"$JOBS"
}

say "Release build"
if build build -DCMAKE_BUILD_TYPE=Release; then
  say "unit tests (Release)"
  run_ctest build
else
  fail_stage "Release build"
fi

if [[ $QUICK == 0 ]]; then
  say "ASan + UBSan build"
  if build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_SANITIZE=ON; then
    say "unit tests (ASan + UBSan)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 run_ctest build-asan
  else
    fail_stage "ASan build"
  fi
fi

if [[ -x build/deepinfer ]]; then
  say "end-to-end tests (pytest)"
  log="$(mktemp)"
  DEEPINFER_BIN="$REPO/build/deepinfer" .venv/bin/python -m pytest -q tests/e2e 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line="$(tail -5 "$log" | grep -E '(passed|failed|error|no tests ran)' | tail -1)"
  p="$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)"
  f=0
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$line" | grep -oE '^[0-9]+'); do f=$((f + n)); done
  count "${p:-0}" "$f"
  if [[ $rc != 0 && $rc != 5 && $f == 0 ]]; then fail_stage "pytest exited $rc"; fi
  rm -f "$log"
fi

if [[ $QUICK == 0 ]]; then
  say "fuzzers (${FUZZ_SECONDS}s each)"
  if CC=clang build build-fuzz -DCMAKE_BUILD_TYPE=Debug -DDI_FUZZ=ON; then
    for fz in build-fuzz/fuzz_*; do
      [[ -x $fz ]] || continue
      name="$(basename "$fz")"
      corpus="tests/fuzz/corpus_${name#fuzz_}"
      work="$(mktemp -d)"
      args=("$work")
      [[ -d $corpus ]] && args+=("$corpus")
      if "$fz" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 -timeout=10 "${args[@]}" >"$work.log" 2>&1; then
        echo "$name: ok ($(grep -oE 'Done [0-9]+ runs' "$work.log" | tail -1))"
        count 1 0
      else
        tail -40 "$work.log"
        fail_stage "fuzzer $name"
      fi
      rm -rf "$work" "$work.log"
    done
  else
    fail_stage "fuzz build"
  fi
fi

echo
echo "$PASSED passed, $FAILED failed"
[[ $FAILED == 0 ]]
