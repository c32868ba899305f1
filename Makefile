# Two commands on a fresh Debian 12 machine:
#   make demo   installs what is missing, builds, runs the main job on the built-in example
#   make test   installs what is missing, builds, runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_TYPE ?= Release

# Debian packages: the core needs the first line; the runtime libtorch (CPU, Gloo) and
# OpenBLAS (without it libtorch falls back to a reference BLAS, 10x slower); SentencePiece
# for harp data prepare; oneDNN (the library libtorch links) for the runtime's float32
# products; Python torch, numpy and sentencepiece for the independent
# reference checks of the tests.
DEB_PACKAGES := cmake g++ make pkg-config nlohmann-json3-dev libyaml-cpp-dev libcli11-dev \
                libtorch-dev libgloo-dev libopenblas0-pthread libdnnl-dev \
                libgtest-dev libgmock-dev libbenchmark-dev \
                libsentencepiece-dev python3-torch python3-numpy python3-sentencepiece

.PHONY: all deps configure build tools test demo bench bench-limits bench-generate bench-testbed bench-replan bench-replan-link evaluation clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# Only what `make demo` runs: harp (and harp-train, which it hands `train` over to).
tools: configure
	cmake --build $(BUILD) -j$(JOBS) --target harp

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE gpu

demo: tools
	BUILD=$(BUILD) ./scripts/demo.sh

bench: build
	$(BUILD)/bench/sim_bench
	$(BUILD)/bench/planner_bench
	python3 bench/plan_process.py --harp current=$(BUILD)/src/cli/harp
	python3 bench/profile_accuracy.py --harp $(BUILD)/src/cli/harp

# harp generate against an eager PyTorch loop, one thread (docs/runtime.md, Generation; ~80 s).
bench-generate: build
	/usr/bin/python3 bench/generate_vs_eager.py --harp $(BUILD)/src/cli/harp

# Every documented size limit at full scale (docs/file_formats.md, Limits; ~2 min, 4 GB of /tmp).
bench-limits: build
	/usr/bin/python3 bench/limits.py --harp $(BUILD)/src/cli/harp

# The simulator's accuracy over 42 plans trained on the emulated cluster (root; ~9 min).
bench-testbed: tools
	python3 bench/testbed_accuracy.py --harp $(BUILD)/src/cli/harp

# Re-planning on drift on the testbed (root; ~8 min): a pool 2x slower mid-run, a run that
# re-plans beside one that does not (bench/replan_drift.py).
bench-replan: tools
	python3 bench/replan_drift.py --harp $(BUILD)/src/cli/harp

# The same with a link 4x slower mid-run on the pools joined pairwise (root; ~8 min).
bench-replan-link: tools
	python3 bench/replan_drift.py --harp $(BUILD)/src/cli/harp --link auto --factor 4

# The paper's evaluation (docs/evaluation.md): every figure, simulated at paper scale
# (~2 min) and measured on the emulated testbed (root, network namespaces; ~18 min).
# PART=simulated or PART=measured runs one half; the charts land in out/evaluation/.
PART ?= all
evaluation: tools
	python3 bench/paper/run_all.py --harp $(BUILD)/src/cli/harp --part $(PART)

clean:
	rm -rf $(BUILD)
