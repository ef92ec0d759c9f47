# bloatlab: set up, test and try it on a Debian (bookworm) machine, as root.
# Every target is idempotent: run `make test` as often as you like.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The first python3 >= 3.11 on PATH (bookworm's own python3 is 3.11). Recursive (`?=`), so it
# is looked up again after `packages` may have installed one.
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && { $$p -c 'import sys; print(sys.executable)'; break; }; done)
# cargo on PATH, else rustup's default place.
CARGO ?= $(shell command -v cargo 2>/dev/null || { test -x $(HOME)/.cargo/bin/cargo && echo $(HOME)/.cargo/bin/cargo; })
VENV ?= .venv
# The oldest Rust that builds the datapath (rust-version in Cargo.toml).
RUST_MIN := 78
# The optional dependencies `make venv` installs (`make test` asks for test,sim,cluster,calibrate).
EXTRAS ?= test,calibrate

# command:Debian package, for the tools the experiments run.
TOOLS := ip:iproute2 tc:iproute2 iperf3:iperf3 ping:iputils-ping curl:curl ethtool:ethtool \
	irtt:irtt nghttpd:nghttp2-server openssl:openssl
# What builds bloatlab's BPF DCTCP (bpf/bloatlab_dctcp.bpf.c), for kernels without tcp_dctcp, as
# command (or file):Debian package. Optional: asked for only where the kernel has BTF, and a machine
# that cannot have them still sets up, without cc = "dctcp" (bloatlab doctor says why).
BPF_TOOLS := clang:clang bpftool:bpftool /usr/include/bpf/bpf_helpers.h:libbpf-dev
BTF := /sys/kernel/btf/vmlinux
BPF_DIR := target/bpf

.PHONY: help setup packages build bpf venv test fuzz demo bench docs clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z]+):.*## /\1\t/' \
		| awk -F'\t' '{ printf "  make %-9s %s\n", $$1, $$2 }'

setup: packages build venv ## everything below: packages, the datapath binary, .venv/bin/bloatlab

# The packages' own daemons (irtt's server) are not started: policy-rc.d refuses them while
# installing, unless the machine has its own policy.
packages: ## apt-get install only what is missing (tools, python3-venv, cargo, a C linker; clang, bpftool, libbpf-dev where the kernel has BTF)
	@have() { command -v "$$1" >/dev/null 2>&1 || test -x "/usr/sbin/$$1" || test -x "/sbin/$$1"; }; \
	missing=""; \
	for pair in $(TOOLS); do have "$${pair%%:*}" || missing="$$missing $${pair#*:}"; done; \
	python="$(PYTHON)"; \
	if [ -z "$$python" ]; then missing="$$missing python3 python3-venv"; \
	elif ! "$$python" -c 'import ensurepip, venv' 2>/dev/null; then missing="$$missing python3-venv"; fi; \
	[ -n "$(CARGO)" ] || missing="$$missing cargo"; \
	have cc || missing="$$missing gcc libc6-dev"; \
	missing=$$(printf '%s\n' $$missing | sort -u | tr '\n' ' '); \
	optional=""; \
	if [ -r $(BTF) ]; then for pair in $(BPF_TOOLS); do \
		case "$${pair%%:*}" in /*) test -e "$${pair%%:*}" ;; *) have "$${pair%%:*}" ;; esac \
			|| optional="$$optional $${pair#*:}"; done; fi; \
	if [ -z "$${missing// /}" ] && [ -z "$${optional// /}" ]; then echo "packages: nothing missing"; exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		if [ -n "$${optional// /}" ]; then echo "packages: missing for cc = \"dctcp\" (optional):$$optional" >&2; fi; \
		if [ -z "$${missing// /}" ]; then exit 0; fi; \
		echo "packages: missing: $$missing- run as root, or install them" >&2; exit 1; fi; \
	echo "packages: installing $$missing$$optional"; \
	printf '%s\n' 'iperf3 iperf3/start_daemon boolean false' \
		'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -q; \
	policy=/usr/sbin/policy-rc.d; own_policy=""; \
	if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy; chmod +x $$policy; own_policy=1; fi; \
	rc=0; if [ -n "$${missing// /}" ]; then apt-get install -y -q $$missing || rc=$$?; fi; \
	if [ $$rc -eq 0 ] && [ -n "$${optional// /}" ]; then apt-get install -y -q $$optional \
		|| echo "packages: could not install$$optional; cc = \"dctcp\" needs them where the kernel has no tcp_dctcp" >&2; fi; \
	if [ -n "$$own_policy" ]; then rm -f $$policy; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled irtt.service >/dev/null 2>&1; then \
		if systemctl disable --now irtt.service >/dev/null 2>&1; then \
			echo "packages: disabled irtt.service (an irtt server on every address); runs start their own"; fi; fi

build: packages ## cargo build --release: target/release/bloatlab-link; then the BPF DCTCP (make bpf)
	@test -n "$(CARGO)" || { echo "build: no cargo on PATH or in ~/.cargo/bin" >&2; exit 1; }
	@minor=$$($(CARGO) --version | sed -nE 's/^cargo 1\.([0-9]+).*/\1/p'); \
	test -n "$$minor" && [ "$$minor" -ge $(RUST_MIN) ] || { echo "build: $$($(CARGO) --version) is too old:" \
		"bloatlab-link needs Rust 1.$(RUST_MIN) or newer; install it with rustup (https://rustup.rs): Debian bookworm's is older" >&2; exit 1; }
	$(CARGO) build --release
	@$(MAKE) --no-print-directory bpf

# bpf/build.sh builds the object against this kernel's BTF into target/bpf, where
# bloatlab.binaries finds it (a wheel's build puts it in the package: setup.py). Nothing here
# fails the build: without BTF or clang there is no object, and cc = "dctcp" is available only
# where the kernel has tcp_dctcp (bloatlab doctor says which).
bpf: ## the BPF DCTCP (bpf/bloatlab_dctcp.bpf.c) into target/bpf, where the kernel has BTF and clang is here
	@sh bpf/build.sh $(BPF_DIR)

venv: $(VENV)/.stamp-$(EXTRAS) ## .venv with bloatlab installed editable, with the extras (make test: test,sim,cluster,calibrate)
	@# Bytecode for the sources, as pip writes it for an installed wheel: with none (an editable
	@# install where PYTHONDONTWRITEBYTECODE is set) every command compiles its ~100 modules again,
	@# a quarter of a second of each run. Only what changed is compiled again.
	@$(VENV)/bin/python -m compileall -q src/bloatlab >/dev/null || echo "venv: some bytecode under src/ could" \
		"not be written (another user's __pycache__?); commands then compile those modules as they start" >&2

# Reinstalled only when pyproject.toml is newer than the stamp of these extras. The install builds the Rust
# binaries into the package too (setuptools-rust), as a wheel does; in a checkout, `make build`'s
# target/release copies are the ones used (bloatlab.binaries).
$(VENV)/.stamp-$(EXTRAS): pyproject.toml | build
	@test -n "$(PYTHON)" || { echo "venv: no python3 >= 3.11 on PATH" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	PATH="$(dir $(CARGO)):$$PATH" $(VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	touch $@

# The report tests open report.html in headless Chromium, the capture tests read pcapng files
# with tshark, and the simulated runs compile their ns-3 driver with g++: only `make test` needs
# them. It installs the sim (ns-3) and cluster (Ray) extras too: the suite runs simulated runs
# and sweeps on a real local Ray cluster. cargo goes on pytest's PATH for the test that builds
# the wheel.
#
# pytest runs twice. First what builds no namespace (unit tests, the fuzz targets, ns-3's
# simulations, the reports in Chromium, bad input): CPU work with no clock to keep, on up to
# TEST_WORKERS CPUs (pytest-xdist, a file to a worker, so a module's fixture is built once). Then
# the namespace tests one at a time: their links keep real time, and a busy machine would be
# their error, not the datapath's. A pass that collects nothing fails (pytest's exit 5).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST = PATH="$(dir $(CARGO)):$$PATH" $(VENV)/bin/python -m pytest -q
test: TOOLS += chromium:chromium tshark:tshark g++:g++
test: packages build ## cargo test, the layers' import contract (lint-imports), then pytest (root for namespaces)
	@# The Rust tests compile (their own target/debug) while pip fills the venv, which leaves a
	@# core mostly idle; cargo test then shows any error of theirs.
	@$(CARGO) test --workspace --no-run --quiet >/dev/null 2>&1 & early=$$!; \
	trap 'kill $$early 2>/dev/null; exit 130' INT TERM; \
	rc=0; $(MAKE) --no-print-directory venv EXTRAS=test,sim,cluster,calibrate || rc=$$?; \
	wait $$early; exit $$rc
	$(CARGO) test --workspace
	$(VENV)/bin/lint-imports
	@worst=0; \
	pass() { echo "pytest $$*"; rc=0; $(PYTEST) "$$@" tests || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest $$* collected no tests; that is a failure" >&2; rc=1; fi; \
	  [ $$rc -eq 0 ] || worst=$$rc; }; \
	pass -n $(TEST_WORKERS) --dist loadfile -m "not netns"; \
	pass --durations=25 -m netns; \
	exit $$worst

# The fuzz targets' long campaign (docs/fuzzing.md); `make test` runs their short one. Each target
# runs FUZZ_SCALE times its short campaign's cases: the Rust ones (proptest) in a release build
# that keeps overflow checks, the Python ones (Hypothesis) at random, their failures kept in
# .hypothesis/ and tried first next time (proptest's in datapath/fuzz/proptest-regressions/).
FUZZ_SCALE ?= 100
fuzz: packages build ## the fuzz targets' long campaign: proptest over the datapath's parsers and disciplines, Hypothesis over every Python parser of input (docs/fuzzing.md)
	@$(MAKE) --no-print-directory venv EXTRAS=test,calibrate
	CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_TARGET_DIR=target/fuzz FUZZ_SCALE=$(FUZZ_SCALE) \
		$(CARGO) test --release -p bloatlab-fuzz -- --nocapture
	BLOATLAB_FUZZ=long BLOATLAB_FUZZ_FACTOR=$(FUZZ_SCALE) $(VENV)/bin/python -m pytest -q -p no:cacheprovider \
		--hypothesis-show-statistics tests/fuzz

DEMO_OUT ?= results/demo
demo: setup ## the CS244 experiment at maxq 20 and 100 (60 s each): aggregate, plots, report.html
	@test "$$(id -u)" = 0 || { echo "demo: run it as root (it builds network namespaces)" >&2; exit 1; }
	rm -rf $(DEMO_OUT)/cs244
	$(VENV)/bin/bloatlab run --preset cs244 --sweep maxq=20,100 --out $(DEMO_OUT)/cs244
	@echo; echo "CS244 bufferbloat, maxq 20 against 100:"; echo
	@$(VENV)/bin/bloatlab compare $(DEMO_OUT)/cs244/maxq=20/rep1 $(DEMO_OUT)/cs244/maxq=100/rep1
	@echo; echo "the report (open it in a browser): $(CURDIR)/$(DEMO_OUT)/cs244/report.html"
	@echo "plots: $(CURDIR)/$(DEMO_OUT)/cs244/plots/   data: aggregate.csv, series.csv.gz (docs/sweeps.md)"

docs: venv ## rewrite the tables of docs/queues.md from the catalogue of disciplines
	$(VENV)/bin/python -m bloatlab.cli.queues docs/queues.md

bench: setup ## the link benchmark: bloatlab bench link
	$(VENV)/bin/bloatlab bench link

clean: ## remove leftover bloatlab namespaces, then target, .venv and build
	@if [ -x $(VENV)/bin/bloatlab ]; then \
		$(VENV)/bin/bloatlab clean || echo "clean: bloatlab clean failed; removing the rest anyway" >&2; fi
	rm -rf target $(VENV) build src/*.egg-info src/bloatlab/_bin
	find src tests -name __pycache__ -prune -exec rm -rf {} +
