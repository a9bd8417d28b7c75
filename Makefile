# spindle — one plain Makefile.
#   make            build/spindle (optimised for this host; ISA kernels chosen at run time)
#   make PORTABLE=1 generic binary (no -march=native; runtime dispatch keeps scalar fallbacks)
#   make run        fetch the default model and run the chat demo
#   make test       every test (unit, golden, CLI, server)
#   make asan       build-asan/spindle with AddressSanitizer + UBSan
#   make fuzz       libFuzzer targets (clang)
#   make bench      spindle bench on the default model

CC      ?= cc
BUILD   ?= build
# Install what the build needs before pkg-config is asked (idempotent, ~0.1 s).
ifneq ($(MAKECMDGOALS),clean)
SETUP_STATUS := $(shell scripts/setup --quiet >&2 && echo ok)
ifneq ($(SETUP_STATUS),ok)
$(error scripts/setup failed)
endif
endif
PKGS    := libmicrohttpd jansson libpcre2-8 libutf8proc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT     ?= -O3
ifeq ($(PORTABLE),1)
ARCH    :=
else
ARCH    := -march=native
endif
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS_BASE := -std=gnu11 $(WARN) -g -fno-strict-aliasing -pthread -Iinclude -Isrc $(PKG_CFLAGS)
CFLAGS  ?= $(OPT) $(ARCH)
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS) -MMD -MP
LDLIBS  := $(PKG_LIBS) -lm -pthread

# Per-ISA translation units get their own flags and are only called after a
# run-time CPU check (src/core/cpu.c); no FMA contraction there, so a tile's
# arithmetic is exactly what the source says whatever the inlining context
# (batch invariance).
AVX2_FLAGS   := -mavx2 -mfma -mf16c -mbmi2 -ffp-contract=off
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
FLAGS_avx2      := $(AVX2_FLAGS)
FLAGS_avx512    := $(AVX512_FLAGS)
# the scalar and the 16-lane softmax must round alike
FLAGS_attention := -ffp-contract=off
# the packed oracle must round as the packed kernels do
FLAGS_packed    := -ffp-contract=off

LIB_SRC   := $(sort $(wildcard src/*/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test test-unit test-py asan test-asan test-tsan fuzz fuzz-build fuzz-lib tsan bench clean setup deps tests \
        compile-all xtarget
all: $(BUILD)/spindle

deps: ;

$(BUILD)/libspindle.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/spindle: $(TOOL_OBJ) $(BUILD)/libspindle.a
	$(CC) $(ALL_CFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(FLAGS_$(notdir $*)) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libspindle.a tests/unit/check.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BIN)

# Micro-benchmarks (bench/*.c: attention alone, one packed matmul tile),
# built with the tests so they keep compiling; run by hand (docs/performance.md).
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench_%)
$(BUILD)/bench_%: bench/%.c $(BUILD)/libspindle.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

run: all
	@scripts/demo

# Everything that compiles: library, tools, unit tests, micro-benchmarks.
compile-all: all $(TEST_BIN) $(BENCH_BIN)

# A second target: -march changes how gcc inlines and vectorises, and with
# that which -Wmaybe-uninitialized style warnings fire, so `make test` also
# compiles everything for an x86-64 level the host is not (AVX2 on an AVX-512
# host, AVX-512 elsewhere), warnings as errors.  Compiling for a target needs
# no CPU that runs it; nothing built here runs.
XTARGET ?= $(if $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo y),x86-64-v3,x86-64-v4)
xtarget:
	@$(MAKE) --no-print-directory BUILD=build/xtarget-$(XTARGET) ARCH=-march=$(XTARGET) compile-all

test: compile-all xtarget
	@echo "make test: compiled for the host (-march=native) and for -march=$(XTARGET)"
	@scripts/run-tests $(BUILD)

test-unit: all $(TEST_BIN)
	@scripts/run-tests $(BUILD) unit

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 CFLAGS="-O1 $(ARCH) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" LDFLAGS="-fsanitize=address,undefined" build-asan/spindle tests

# Every unit test and the pytest suite against build-asan/spindle.  Sanitizer
# reports abort the process (-fno-sanitize-recover, ASan's default), so any
# report fails the test that triggered it.  ASAN_PYTEST_ARGS deselects the
# heaviest golden tests (long 2-model logit comparisons that take minutes each
# under ASan on 2 cores; the plain build runs them in `make test`): see
# docs/reliability.md for the timings behind the choice.
ASAN_PYTEST_ARGS ?= -k "not (test_goldens and (gemma3 or teacher))"
test-asan: asan
	@PYTEST_ADDOPTS='$(ASAN_PYTEST_ARGS)' ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 scripts/run-tests build-asan

# ThreadSanitizer build of the binary only (the server is the threaded part).
# The numeric code (src/kernels, src/quant, src/model) is compiled without
# TSan instrumentation, by a first sub-make pass, which the second pass then
# finds up to date: instrumented, a 40-token run takes minutes.  Races are
# still checked in everything around it: the thread pool (src/core), engine,
# KV cache, scheduler and HTTP layer.
TSAN_PLAIN_OBJ := $(filter build-tsan/obj/src/kernels/% build-tsan/obj/src/quant/% build-tsan/obj/src/model/%,$(LIB_SRC:%.c=build-tsan/obj/%.o))
tsan:
	$(MAKE) BUILD=build-tsan CFLAGS="-O2 $(ARCH)" $(TSAN_PLAIN_OBJ)
	$(MAKE) BUILD=build-tsan OPT=-O1 CFLAGS="-O1 $(ARCH) -fsanitize=thread -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread" build-tsan/spindle

# The server tests against build-tsan/spindle; a data race kills the server
# (halt_on_error), which fails the test that was running.
TSAN_TESTS := tests/py/test_server.py tests/py/test_server_failures.py tests/py/test_server_faults.py
test-tsan: tsan
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" SPINDLE=$(CURDIR)/build-tsan/spindle \
	    build/venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 $(TSAN_TESTS)

# libFuzzer targets: tests/fuzz/fuzz_NAME.c, seeds in tests/fuzz/corpus/NAME/.
# clang-16 (Debian 12): clang-14 cannot compile _Float16 on x86-64.
FUZZ_CC      ?= clang-16
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 40
FUZZ_CFLAGS  := -O1 -g $(ARCH) -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# The library is built by a sub-make (its own BUILD dir and flags); the
# targets relink every time, which takes a second.
fuzz-lib:
	$(MAKE) CC=$(FUZZ_CC) BUILD=build-fuzz CFLAGS="$(FUZZ_CFLAGS)" build-fuzz/libspindle.a

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c fuzz-lib
	$(FUZZ_CC) $(CFLAGS_BASE) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< build-fuzz/libspindle.a $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

# Runs every target for FUZZ_SECONDS; findings land in build-fuzz/findings/.
fuzz: fuzz-build
	@scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_BIN)

bench: all
	@$(BUILD)/spindle bench -m $$(scripts/fetch-model smollm2-135m)

clean:
	rm -rf build/obj build/libspindle.a build/spindle build/tests build/xtarget-* build-asan

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
