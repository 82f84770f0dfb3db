# Two commands on a fresh machine: `make setup` then `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: setup build test test-release check check-labelled test-sanitize fuzz fuzz-build fuzz-smoke clean bench demo device-bundle

setup:
	bash scripts/setup.sh

build:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Each phase of CI (`bash .ci/run`: setup, then `make test`, then `make check`) runs under a budget
# in seconds, build included, on this project's 2-core machines: past it the phase is stopped and
# fails, so a slow test shows up as a failure here rather than as CI running out of time. The
# budgets leave room for a noisy machine above what the phases take (make test about 10 minutes
# from a fresh clone, its target 12; docs/testing.md has the measured times).
TEST_BUDGET_S ?= 840
SANITIZE_BUDGET_S ?= 1200
FUZZ_BUDGET_S ?= 900
LABELLED_BUDGET_S ?= 300
budget = timeout --kill-after=10 $(1) $(2) || { rc=$$?; [ $$rc -ne 124 ] || \
  echo "make: $(3) ran past its budget of $(1) s (Makefile)"; exit $$rc; }

# `make test`: the Release build and the Release suite, but for the tests labelled `check`
# (servers, several processes, injected faults: tests/ctest-labels.cmake), which `make check` runs. While iterating, `cd build && ctest -R pattern`.
test:
	@$(call budget,$(TEST_BUDGET_S),$(MAKE) --no-print-directory build test-release,make test)

test-release:
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE '^check$$'

# `make check`: what CI runs after `make test` — the tests labelled `check`, the suite under the
# sanitizers (test-sanitize) and the fuzz smoke run (fuzz-smoke), each within its budget.
check:
	@$(call budget,$(LABELLED_BUDGET_S),$(MAKE) --no-print-directory check-labelled,the labelled tests)
	@$(call budget,$(SANITIZE_BUDGET_S),$(MAKE) --no-print-directory test-sanitize,test-sanitize)
	@$(call budget,$(FUZZ_BUDGET_S),$(MAKE) --no-print-directory fuzz-smoke,fuzz-smoke)

check-labelled: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L '^check$$' --no-tests=ignore

# The suite under ASan + UBSan (-fno-sanitize-recover: UB fails the test; LeakSanitizer on), built
# with gcc at -O1 in $(SAN_BUILD_DIR) without cuda/: the unit tests and the end-to-end tests on
# tiny random models; the tests on the real models (labels real-model and check) run in the
# Release build only. SAN_EXCLUDE: a ctest -E regex of further tests to leave out while iterating.
SAN_BUILD_DIR ?= build-asan
SAN_EXCLUDE ?=
test-sanitize:
	cmake -S . -B $(SAN_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DRAGKV_SANITIZE=ON
	cmake --build $(SAN_BUILD_DIR) -j $(JOBS) --target ragkv ragkv_tests
	cd $(SAN_BUILD_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -LE '^(real-model|check)$$' $(if $(SAN_EXCLUDE),-E '$(SAN_EXCLUDE)')

# libFuzzer targets (fuzz/, clang, ASan + UBSan) in $(FUZZ_BUILD_DIR). `make fuzz` runs each for
# FUZZ_SECONDS (FUZZ_TARGETS: a subset) and prints executions, time, corpus size and crashes;
# fuzz-smoke is the short run of `make check`.
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_TARGETS ?=
fuzz-build:
	cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=Release -DRAGKV_FUZZ=ON -DRAGKV_OPENBLAS=OFF
	cmake --build $(FUZZ_BUILD_DIR) -j $(JOBS) --target fuzz-targets fuzz-make-seeds

fuzz: fuzz-build
	bash fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz-build
	bash fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)

# The main job on the bundled defaults: index testdata/rag-mini (6 SQuAD passages), precompute its
# chunk caches, answer its 12 questions in prefix, reuse, blend, craft and auto against full
# recompute, and gate them on agreement with full. Only prefix passes on 12 questions (the gate judges the
# intervals' lower ends; reuse misses by far): eval's exit 1 (quality) is the demo's verdict, not its failure.
DEMO_DIR ?= $(BUILD_DIR)/demo
demo: build
	$(BUILD_DIR)/ragkv build-index --corpus testdata/rag-mini.corpus.jsonl --out $(DEMO_DIR)/index
	$(BUILD_DIR)/ragkv precompute --index $(DEMO_DIR)/index --store $(DEMO_DIR)/store
	$(BUILD_DIR)/ragkv eval testdata/rag-mini.queries.jsonl --index $(DEMO_DIR)/index --store $(DEMO_DIR)/store \
	  --modes prefix,reuse,blend,craft,auto --top-k 3 --report $(DEMO_DIR)/report.md --junit $(DEMO_DIR)/gate.xml \
	  > $(DEMO_DIR)/report.json; rc=$$?; cat $(DEMO_DIR)/report.md; [ $$rc -le 1 ]

bench: build
	$(BUILD_DIR)/ragkv bench prefill

# The CUDA tests and benchmarks for the GPU machine (no -dev packages, no network there): portable
# binaries and their non-system libraries in device-bundle/, which the device tool carries.
# On the device: device-bundle/run ragkv_tests -tc='cuda*'   (see README "GPU machine").
device-bundle:
	cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DRAGKV_NATIVE=OFF -DRAGKV_OPENBLAS=OFF
	cmake --build build-device -j $(JOBS) --target ragkv ragkv_tests
	bash scripts/device-bundle.sh build-device device-bundle

clean:
	rm -rf $(BUILD_DIR)
