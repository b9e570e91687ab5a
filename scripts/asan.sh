#!/usr/bin/env bash
# Build tensorplay._C with AddressSanitizer + UBSan in a separate tree
# (build/asan/, the normal in-place build is untouched) and run the test
# suite under it.
#
#   scripts/asan.sh                 # whole suite, reduced fuzz budget
#   scripts/asan.sh tests/test_x.py -k foo    # any pytest arguments
#
# Python itself is not instrumented: libasan is LD_PRELOADed, PYTHONMALLOC=malloc
# routes Python's allocations through the sanitizer's malloc, and leak
# detection is off (the interpreter's own allocations at exit are not ours).
# Reports go to build/asan/reports/; the script fails if any report exists.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=$ROOT/build/asan
PY=${PY:-python3}
CC_BIN=${ASAN_CC:-gcc}

mkdir -p "$TREE"
# copy the working tree (tracked and untracked, not ignored build outputs) into the separate tree
(cd "$ROOT" && git ls-files -co --exclude-standard | grep -v '\.so$' \
   | while read -r f; do [ -f "$f" ] && echo "$f"; done | tar -cf - -T -) | (cd "$TREE" && tar -xf -)

SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize=vptr"
cd "$TREE"
echo "asan.sh: building in $TREE"
CC="$CC_BIN" STAX_CFLAGS="$SAN -O1" STAX_LDFLAGS="-fsanitize=address,undefined" \
    "$PY" setup.py -q build_ext --inplace -j 2 --build-temp "$TREE/tmp" >"$TREE/build.log" 2>&1 \
    || { tail -40 "$TREE/build.log"; exit 1; }

LIBASAN=$("$CC_BIN" -print-file-name=libasan.so)
LIBUBSAN=$("$CC_BIN" -print-file-name=libubsan.so)
REPORTS=$TREE/reports
rm -rf "$REPORTS" && mkdir -p "$REPORTS"

export PYTHONPATH="$TREE/python:${PYTHONPATH:-}"
# libasan's dlopen interceptor breaks $ORIGIN lookups inside dlopen()ed
# libraries (libnvrtc loads libnvrtc-builtins next to itself): name the dir
NVRTC_DIR=$("$PY" -c 'import os, site
for p in site.getsitepackages():
    d = os.path.join(p, "nvidia", "cuda_nvrtc", "lib")
    if os.path.isdir(d):
        print(d)
        break' 2>/dev/null || true)
[ -n "$NVRTC_DIR" ] && export LD_LIBRARY_PATH="$NVRTC_DIR:${LD_LIBRARY_PATH:-}"
export PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:detect_odr_violation=0:halt_on_error=1:abort_on_error=0:log_path=$REPORTS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$REPORTS/ubsan"
export TENSORPLAY_ASAN=1
export TENSORPLAY_FUZZ_N=${TENSORPLAY_FUZZ_N:-60}
export TENSORPLAY_LEAK_N=${TENSORPLAY_LEAK_N:-2000}
export TENSORPLAY_NUM_THREADS=${TENSORPLAY_NUM_THREADS:-2}

ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(tests)
echo "asan.sh: running pytest ${ARGS[*]} under ASan/UBSan"
set +e
LD_PRELOAD="$LIBASAN:$LIBUBSAN" "$PY" -m pytest -q -p no:cacheprovider "${ARGS[@]}"
rc=$?
set -e
if compgen -G "$REPORTS/*" >/dev/null; then
    echo "asan.sh: sanitizer reports:"
    for f in "$REPORTS"/*; do echo "== $f"; head -60 "$f"; done
    exit 1
fi
[ $rc -eq 0 ] && echo "asan.sh: clean" || echo "asan.sh: pytest failed (rc=$rc), no sanitizer report"
exit $rc
