# Two commands on a fresh machine: `make demo` and `make test`. Each installs what is missing.
PY ?= python3
export PYTHONPATH := $(CURDIR)/python:$(PYTHONPATH)
# ccache (when present) keeps rebuilds of unchanged rooms cheap
export CC := $(shell command -v ccache >/dev/null 2>&1 && echo "ccache gcc" || echo gcc)

.PHONY: deps build test demo bench fuzz asan clean
deps: .stamp-deps
.stamp-deps:
	@if ! command -v llvm-config-19 >/dev/null 2>&1 || [ ! -f /usr/include/xxhash.h ]; then \
	  echo "installing llvm-19-dev libxxhash-dev"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq llvm-19-dev libxxhash-dev ccache) >/dev/null; fi
	$(PY) -m pip install -q numpy pytest hypothesis scikit-learn matplotlib setuptools wheel nvidia-cuda-nvrtc-cu12
	@# parity tests compare with PyTorch's CPU build where it can be had (they skip without it)
	$(PY) -m pip install -q torch==2.13.0 || echo "torch 2.13.0 not installed: PyTorch parity tests will skip"
	touch $@

build: deps
	$(PY) setup.py -q build_ext --inplace -j 2
	@[ -f .stamp-editable ] || ($(PY) -m pip install -q --no-build-isolation --no-deps -e . && touch .stamp-editable)

test: build
	$(PY) -m pytest tests

demo: build
	$(PY) examples/quickstart.py
	$(PY) examples/digits.py

bench: build
	$(PY) -m bench

N ?= 2000
fuzz: build
	TENSORPLAY_FUZZ_N=$(N) $(PY) -m pytest -q tests/fuzz

# AddressSanitizer + UBSan build of the extension, test suite under it
asan: deps
	bash scripts/asan.sh

clean:
	rm -rf build python/tensorplay/*.so .stamp-*
