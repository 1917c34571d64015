# uroce developer entry points. `make test` is what CI runs (through .ci/run).
#
#   make build        build every crate and target (debug), and the C library (make cabi)
#   make cabi         target/debug/uroce-lib/libibverbs.so.1 and librdmacm.so.1: uroce as a
#                     drop-in libibverbs and librdmacm for unmodified C programs (run them
#                     with `uroce exec -- PROGRAM`)
#   make test         fmt check, clippy -D warnings, unit/property/integration/doc tests
#                     (with uroce-verbs' async API: --features uroce-verbs/tokio), and a
#                     short fuzz smoke of every fuzz target
#   make fuzz         longer fuzzing of every target (FUZZ_SECS each, default 300)
#   make bench        throughput figures (not a test; numbers are printed, never asserted)
#   make bench-instr  instructions, conditional branches, calls and allocations per message
#                     in uroce's verbs (callgrind; needs valgrind): figures the host's load
#                     does not move
#   make lab-bench    uroce against rxe in the lab's guests, side by side (root; figures only)
#   make lab-interop  interop matrix against Linux rxe in ../shared/rxe-lab (root; brings the
#                     lab up and down; ~5-20 min; not part of `make test`)
#   make lab-conform  the conformance scenarios against rxe in a lab guest, via the agent
#                     (root; a table per address family; not part of `make test`)

SHELL := /bin/bash
CARGO ?= cargo
FUZZ_SEED ?= 1
FUZZ_SMOKE_RUNS ?= fuzz_frame=8000000 fuzz_udp_payload=12000000 fuzz_roundtrip=12000000 fuzz_rc_qp=80000 fuzz_mad=2500000 fuzz_cm=40000
FUZZ_SMOKE_MAX_SECS ?= 120
FUZZ_SECS ?= 300
FUZZ_TARGETS = $(shell sed -n 's/^name = "\(fuzz_[a-z0-9_]*\)"/\1/p' fuzz/Cargo.toml)
# cargo-fuzz needs nightly features; on the stable toolchain RUSTC_BOOTSTRAP=1 allows them.
# Overflow checks stay on (--debug-assertions): an arithmetic overflow on any input is a bug.
FUZZ_ENV = RUSTC_BOOTSTRAP=1
FUZZ_FLAGS = --sanitizer none --release --debug-assertions

.PHONY: all build cabi cabi-release bench-cabi bench-instr test fmt-check clippy unit-test fuzz-build fuzz-smoke fuzz bench lab-interop lab-bench lab-conform demo clean

all: build

build:
	$(CARGO) build --workspace --all-targets
	$(MAKE) cabi

# The staticlib of verbs-api/ibverbs linked with the version script of rdma-core 44's
# symbol versions (a Rust cdylib cannot carry them), and librdmacm.so.1 beside it (a shim
# of jumps into libibverbs.so.1, where the rdma_cm functions are: link.sh says why);
# `uroce exec` finds the libraries in uroce-lib/ next to the uroce binary of the same profile.
cabi:
	$(CARGO) build -p uroce-ibverbs --lib
	$(CARGO) build -p uroce-tools --bin uroce
	bash verbs-api/ibverbs/link.sh $${CARGO_TARGET_DIR:-target}/debug

cabi-release:
	$(CARGO) build --release -p uroce-ibverbs --lib
	$(CARGO) build --release -p uroce-tools --bin uroce
	bash verbs-api/ibverbs/link.sh $${CARGO_TARGET_DIR:-target}/release

test: fmt-check clippy unit-test fuzz-smoke
	@echo "make test: fmt, clippy, tests and fuzz smoke all passed"
	@if [ -s $(SKIP_LOG) ]; then echo "skipped (what this machine lacks):"; sort -u $(SKIP_LOG) | sed 's/^/  /'; fi
	@s=$$(sort -u $(SKIP_LOG) 2>/dev/null | wc -l); \
	  awk -v s=$$s '/^test result:/ { p += $$4; f += $$6 } END { printf "tests: %d passed, %d failed, %d skipped\n", p - s, f, s }' target/test-results.log

fmt-check:
	$(CARGO) fmt --all -- --check
	cd fuzz && $(CARGO) fmt -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p uroce-verbs --all-targets --features tokio -- -D warnings

# Test output is kept in target/test-results.log so `make test` can print the totals last.
# A test that cannot run here (a lab tool or a Debian binary missing) passes after writing a
# line to $(SKIP_LOG) (tests/support/skip.rs); the totals count it as skipped and list why.
# UROCE_REQUIRE_CABI=1: the C ABI tests fail, instead of skipping, when uroce's
# libibverbs.so.1 is not built (unit-test builds it: make cabi).
SKIP_LOG = $(CURDIR)/target/test-skips.log
export UROCE_SKIP_LOG = $(SKIP_LOG)
# TEST_FEATURES: the async API (uroce-verbs' `tokio` feature) is tested too; its tests and
# the async_echo example need it. The C library (make cabi) is built without it.
TEST_FEATURES = --features uroce-verbs/tokio
unit-test: cabi
	@mkdir -p target; rm -f $(SKIP_LOG)
	# The tool tests run the examples as programs, so build them under their plain names.
	$(CARGO) build --workspace --examples $(TEST_FEATURES)
	# Not --all-targets: that would also run the harness-less benchmarks as tests.
	set -o pipefail; UROCE_REQUIRE_CABI=1 \
	  $(CARGO) test --workspace --lib --bins --tests --examples $(TEST_FEATURES) 2>&1 | tee target/test-results.log
	set -o pipefail; $(CARGO) test --workspace --doc $(TEST_FEATURES) 2>&1 | tee -a target/test-results.log

fuzz-build:
	cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz build $(FUZZ_FLAGS)

# Each target runs from its seed corpus (taken from the rxe captures) with a fixed seed and
# a fixed number of runs (about 10 s each on 2 cores), so that CI explores the same inputs
# every time; exploring is `make fuzz`'s job. On a crash the panic and the log's tail are
# printed, with the seed; the input is saved under fuzz/artifacts/<target>/.
fuzz-smoke: fuzz-build
	@set -eo pipefail; mkdir -p target; for t in $(FUZZ_TARGETS); do \
	  runs=$$(for kv in $(FUZZ_SMOKE_RUNS); do [ "$${kv%%=*}" = "$$t" ] && echo "$${kv#*=}"; done; true); \
	  runs=$${runs:-100000}; \
	  echo "== fuzz smoke: $$t ($$runs runs, seed $(FUZZ_SEED))"; \
	  mkdir -p fuzz/corpus/$$t; log=$(CURDIR)/target/fuzz-smoke-$$t.log; \
	  if ! (cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz run $(FUZZ_FLAGS) $$t corpus/$$t seeds/$$t -- \
	      -seed=$(FUZZ_SEED) -runs=$$runs -max_total_time=$(FUZZ_SMOKE_MAX_SECS) \
	      -print_final_stats=1) > $$log 2>&1; then \
	    grep -m1 -A4 "panicked at" $$log || true; tail -n 30 $$log; \
	    echo "fuzz smoke: $$t FAILED (seed $(FUZZ_SEED), $$runs runs; log $$log)"; exit 1; \
	  fi; \
	  grep -E "^Done|number_of_executed_units|new_units_added" $$log; \
	done

fuzz: fuzz-build
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz: $$t ($(FUZZ_SECS) s)"; \
	  mkdir -p fuzz/corpus/$$t; \
	  (cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz run $(FUZZ_FLAGS) $$t corpus/$$t seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECS) -print_final_stats=1); \
	done

bench:
	$(CARGO) bench -p uroce-wire --bench parse
	$(CARGO) bench -p uroce-provider --bench sim
	$(CARGO) bench -p uroce-provider --bench loopback
	$(MAKE) bench-cabi
	$(MAKE) bench-instr

# Debian's perftest on uroce's libibverbs.so.1 beside `uroce perf` (figures, not asserted).
bench-cabi: cabi-release
	bash verbs-api/ibverbs/bench.sh

# ib_send_lat and ib_write_bw on uroce's libibverbs.so.1, the client under callgrind:
# instructions per message in uroce's verbs, which compare builds on a noisy host.
bench-instr: cabi-release
	UROCE_BIN_DIR=$${CARGO_TARGET_DIR:-target}/release bash verbs-api/ibverbs/instr.sh

# The main job on a fresh machine: an RC pingpong between 127.0.0.1 and 127.0.0.2.
demo:
	$(CARGO) run --release --bin uroce -- pingpong --loopback

# uroce on the host against rdma-core's pingpongs and perftest in an rxe guest: every program
# as server and client, IPv4 with and without 5 % loss, IPv6. One line per case, then
# "N passed, N failed"; the lab is taken down even when a case fails (tests/lab/interop.sh).
lab-interop: cabi-release
	bash tests/lab/interop.sh

# uroce against rxe on the lab's emulated machines (two guests without rxe running uroce,
# then two with rxe; RUNS rounds): a table of medians and ranges, never asserted.
lab-bench: cabi-release
	bash tests/lab/bench.sh

# uroce's conformance scenarios against Linux rxe in a lab guest, through the conformance
# agent: a table per address family of PASS / FAIL (the rule rxe breaks) / N/A
# (tests/lab/conform.sh; root; not part of `make test`).
lab-conform:
	$(CARGO) build --release -p uroce-conform
	bash tests/lab/conform.sh

clean:
	$(CARGO) clean
	rm -rf fuzz/target
