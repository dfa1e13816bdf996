#!/usr/bin/env bash
# test-arm64.sh: the ARM check. Cross-builds DeepInfer for aarch64 (Debian's
# gcc-aarch64-linux-gnu, cmake/toolchain-aarch64.cmake, warnings are errors) into
# build-arm64/ and runs the CPU kernel tests under qemu-aarch64:
#   test_quant        NEON with SDOT (qemu's default cpu "max"), NEON without it
#                     (-cpu cortex-a53, ARMv8.0), and DI_CPU_ISA=scalar
#   test_quant_golden dequantization + matmul against gguf-py goldens (NEON)
#   test_matmul_packed packed Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K layout: NEON with SDOT and
#                     ARMv8.0 (cortex-a53), bit-identical with the scalar reference
#   test_softmax_exp  the attention softmax exp: NEON bit-identical with scalar
#   test_forward_stories  a whole model (NEON kernels + NEON attention)
#   test_row_invariance   bit-identical logits across chunkings, batch compositions,
#                     thread counts and both batch schedules: NEON with SDOT and ARMv8.0
#
# The guest must load the cross toolchain's libc with its own ld.so: with only
# -L, ld.so came from /usr/aarch64-linux-gnu but libc.so.6 from the multiarch
# libc6:arm64 (another glibc build, pulled in with the arm64 -dev packages), and
# pthread_create looped forever in the mismatched stack cache. That, not the
# emulation's speed, is why every threaded test used to hang here.
#
# The whole library is cross-built (not only the backend) because the forward and
# row-invariance tests need the model loader, KV cache and graph; its libraries
# (jansson, PCRE2, utf8proc, libmicrohttpd, xxhash) come from Debian's own arm64
# packages via multiarch, the same versions as the native build. As root, missing
# packages are installed (dpkg --add-architecture arm64 + apt-get); otherwise the
# apt-get command is printed.
#
# Ends with "[arm64] N passed, M failed" (runs); .ci/run counts them.
# Options: --no-apt  -h/--help  (--full is accepted: everything runs by default now)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$REPO/build-arm64"
DO_APT=1
for arg in "$@"; do
  case "$arg" in
    --full) ;;
    --no-apt) DO_APT=0 ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-arm64.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
say() { printf '[arm64] %s\n' "$*"; }

# --- toolchain, emulator and arm64 libraries --------------------------------------------------
PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libmicrohttpd-dev:arm64 libxxhash-dev:arm64)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if ((DO_APT)) && [ "$(id -u)" = 0 ]; then
    say "installing: ${missing[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "missing packages: ${missing[*]}"
    say "run as root: dpkg --add-architecture arm64 && apt-get update && apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

# --- cross build ------------------------------------------------------------------------------
TESTS=(test_quant test_quant_golden test_matmul_packed test_softmax_exp test_forward_stories test_row_invariance)
cmake -S "$REPO" -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE="$REPO/cmake/toolchain-aarch64.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DDI_BENCH=OFF -DDI_EXAMPLES=OFF >/dev/null
cmake --build "$BUILD" -j"${JOBS:-2}" --target "${TESTS[@]}" >/dev/null

# --- run under qemu ---------------------------------------------------------------------------
export DI_SHARED_DATA="${DI_SHARED_DATA:-$REPO/../shared/data}" DI_SOURCE_DIR="$REPO"
fails=0 passes=0
run() { # label test [VAR=value...]: the test's last lines, or all of its output when it fails
  local label=$1 test=$2 out
  shift 2
  say "$label"
  if out=$(env "$@" qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib \
    "$BUILD/$test" 2>&1); then
    tail -n 2 <<<"$out" | sed 's/^/  /'
    passes=$((passes + 1))
  else
    sed 's/^/  /' <<<"$out"
    fails=$((fails + 1))
  fi
}
# qemu-aarch64 honours QEMU_CPU: its default "max" has SDOT, cortex-a53 is plain ARMv8.0.
run "test_quant: NEON + SDOT (cpu max)" test_quant
run "test_quant: NEON ARMv8.0 (cortex-a53, no SDOT)" test_quant QEMU_CPU=cortex-a53
run "test_quant: DI_CPU_ISA=scalar" test_quant DI_CPU_ISA=scalar
run "test_quant_golden: NEON" test_quant_golden
run "test_matmul_packed: NEON + SDOT (cpu max)" test_matmul_packed
run "test_matmul_packed: NEON ARMv8.0 (cortex-a53, no SDOT)" test_matmul_packed QEMU_CPU=cortex-a53
run "test_softmax_exp: NEON vs scalar" test_softmax_exp
run "test_forward_stories: NEON" test_forward_stories
run "test_row_invariance: NEON + SDOT (cpu max)" test_row_invariance
run "test_row_invariance: NEON ARMv8.0 (cortex-a53, no SDOT)" test_row_invariance QEMU_CPU=cortex-a53
say "$passes passed, $fails failed"
((fails == 0))
