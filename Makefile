# Convenience wrapper around CMake/ctest. `make test` is what CI runs.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build test test-asan fuzz demo clean

all: build

deps:
	./scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test:
	./scripts/test-all.sh

demo:
	./scripts/demo.sh

clean:
	rm -rf $(BUILD) build-release build-asan build-clang build-clang-release build-fuzz
