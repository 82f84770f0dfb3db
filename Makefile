# Two commands on a fresh machine: `make setup` then `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: setup build test clean bench

setup:
	bash scripts/setup.sh

build:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD_DIR)/ragkv bench prefill

clean:
	rm -rf $(BUILD_DIR)
