# Two commands on a fresh Debian 12 machine:
#   make demo   installs what is missing, builds, runs the main job on the built-in example
#   make test   installs what is missing, builds, runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_TYPE ?= Release

# Debian packages: the core needs the first line; python3-venv for the virtual environment
# that holds PyTorch (below); SentencePiece for harp data prepare; oneDNN for the runtime's
# float32 products on the CPU; Debian's Python torch 1.13, numpy and sentencepiece for the
# independent reference checks of the tests (a PyTorch other than the one harp links) and
# the 1.13 column of the benches, with OpenBLAS (without it 1.13 falls back to a
# reference BLAS, 10x slower). libgloo-dev: the Gloo headers that c10d's
# ProcessGroupGloo.hpp includes and PyPI's torch wheel does not ship (headers only: the
# Gloo code is libtorch's own; src/runtime/comm/gloo_group.h says why the pairing holds).
DEB_PACKAGES := cmake g++ make pkg-config nlohmann-json3-dev libyaml-cpp-dev libcli11-dev \
                python3-venv libdnnl-dev libopenblas0-pthread libgloo-dev \
                libgtest-dev libgmock-dev libbenchmark-dev \
                libsentencepiece-dev python3-torch python3-numpy python3-sentencepiece

# The libtorch the runtime links: PyPI's torch wheel (CUDA 13.0, NCCL; its libtorch runs on
# the CPU as well), pinned, in a project-local virtual environment that is reused once there
# (about 2.7 GB downloaded, 4.7 GB on disk). 2.11.0 is the PyTorch of the GPU machines the
# project is lent, built for CUDA 13.0 (this machine's toolkit) with the NCCL whose header
# the toolkit carries (docs/runtime.md, "Building against libtorch").
# TORCH_PREFIX=<dir with TorchConfig.cmake> builds against another libtorch 2.x instead.
TORCH_VERSION := 2.11.0
NUMPY_VERSION := 2.4.6
# Hugging Face transformers, the reference the model families are tested against
# (tests/runtime/transformers_test.cc), beside the torch above (about 10 MB).
TRANSFORMERS_VERSION := 5.25.0
VENV ?= .venv
TORCH_PREFIX ?=
HARP_REQUIRE_CUDA ?= OFF
TORCH_STAMP := $(VENV)/.harp-torch-$(TORCH_VERSION)
TRANSFORMERS_STAMP := $(VENV)/.harp-transformers-$(TRANSFORMERS_VERSION)

.PHONY: all deps torch configure build tools test demo volta-check bench bench-sailor bench-pytorch bench-limits bench-generate bench-testbed bench-testbed-interrupts bench-replan bench-replan-link evaluation clean

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

# /usr/bin/python3 is Debian's (the wheel is cp311); python3 on PATH may be another.
$(TORCH_STAMP): | deps
	@echo "installing PyTorch $(TORCH_VERSION) from PyPI into $(VENV) (2.7 GB, once)"
	rm -rf $(VENV)
	/usr/bin/python3 -m venv $(VENV)
	$(VENV)/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check \
	  torch==$(TORCH_VERSION) numpy==$(NUMPY_VERSION)
	$(VENV)/bin/python -c 'import torch; assert torch.__version__.split("+")[0] == "$(TORCH_VERSION)", torch.__version__'
	touch $@

# Into the same environment, so that an environment made before it was pinned keeps its torch.
$(TRANSFORMERS_STAMP): $(TORCH_STAMP)
	@echo "installing transformers $(TRANSFORMERS_VERSION) from PyPI into $(VENV)"
	$(VENV)/bin/pip install --no-cache-dir --progress-bar off --disable-pip-version-check \
	  transformers==$(TRANSFORMERS_VERSION)
	$(VENV)/bin/python -c 'import transformers; assert transformers.__version__ == "$(TRANSFORMERS_VERSION)"'
	touch $@

torch: $(if $(TORCH_PREFIX),,$(TRANSFORMERS_STAMP))

configure: deps torch
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DHARP_WITH_TORCH=ON -DHARP_REQUIRE_CUDA=$(HARP_REQUIRE_CUDA) \
	  -DCMAKE_PREFIX_PATH="$(if $(TORCH_PREFIX),$(TORCH_PREFIX),$$($(VENV)/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'))" \
	  $(if $(TORCH_PREFIX),,-DHARP_TORCH_PYTHON=$(abspath $(VENV))/bin/python)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# Only what `make demo` runs: harp (and harp-train, which it hands `train` over to).
tools: configure
	cmake --build $(BUILD) -j$(JOBS) --target harp

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE gpu

demo: tools
	BUILD=$(BUILD) ./scripts/demo.sh

# One plan, harp's runtime and PyTorch's pipeline runtime side by side (about 2 minutes).
bench-pytorch: build
	python3 bench/pytorch_pipelining.py --harp $(BUILD)/src/cli/harp

bench: build
	$(BUILD)/bench/sim_bench
	$(BUILD)/bench/planner_bench
	python3 bench/plan_process.py --harp current=$(BUILD)/src/cli/harp
	python3 bench/profile_accuracy.py --harp $(BUILD)/src/cli/harp

# The build for clusters with V100s (docs/runtime.md, "Volta"): PyPI's torch 2.10.0 (CUDA
# 12.8, kernels sm_70 ... sm_120) in .venv-volta, harp built against it in build-volta, and
# a pipeline trained on the CPU with exactly the main build's losses (about 12 min, 3 GB).
volta-check: tools
	$(MAKE) VENV=.venv-volta BUILD=build-volta TORCH_VERSION=2.10.0 tools
	./scripts/volta_check.sh build-volta $(BUILD) .venv-volta

# What Sailor's measured GPU profiles are: each block's TFLOP/s against its GPU's float32
# and TF32 peaks, and a roofline fitted to them predicting each model held out
# (examples/profiles/sailor/README.md, docs/cost_model.md; seconds, no build).
bench-sailor: deps
	/usr/bin/python3 bench/sailor_throughput.py
	/usr/bin/python3 bench/sailor_fit.py

# harp generate against PyTorch 2.11 eager and torch.compile and 1.13 eager, one thread
# (docs/runtime.md, Generation; ~4 min).
bench-generate: build
	/usr/bin/python3 bench/generate_vs_eager.py --harp $(BUILD)/src/cli/harp

# Every documented size limit at full scale (docs/file_formats.md, Limits; ~2 min, 4 GB of /tmp).
bench-limits: build
	/usr/bin/python3 bench/limits.py --harp $(BUILD)/src/cli/harp

# The simulator's accuracy over 56 plans trained on the emulated cluster, and the machine's
# floor: each device type alone, twice (root; 20-30 min).
bench-testbed: tools
	python3 bench/testbed_accuracy.py --harp $(BUILD)/src/cli/harp --floor

# What the shaped links' interrupts, and a compute on the other vCPU, cost a computing
# thread's CPU clock (root; ~1.5 min).
bench-testbed-interrupts: tools
	python3 bench/testbed_interrupts.py --harp $(BUILD)/src/cli/harp

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
