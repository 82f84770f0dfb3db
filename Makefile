# Two commands on a fresh machine: `make setup` then `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: setup build test clean bench demo device-bundle

setup:
	bash scripts/setup.sh

build:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The main job on the bundled defaults: index testdata/rag-mini (6 SQuAD passages), precompute its
# chunk caches, answer its 12 questions in blend, reuse and prefix modes against full recompute,
# and gate them on agreement with full. reuse fails the gate by design (it shows the gate sees the
# damage recompute repairs): eval's exit 1 (quality) is the demo's verdict, not its failure.
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
