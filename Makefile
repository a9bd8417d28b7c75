# spindle — one plain Makefile.
#   make            build/spindle (optimised for this host; ISA kernels chosen at run time);
#                   only compiles: the packages it needs come from scripts/setup
#   make PORTABLE=1 generic binary (no -march=native; runtime dispatch keeps scalar fallbacks)
#   make run        scripts/setup --run, build on every core, fetch the default model, run the chat demo
#   make test       scripts/setup, then the tests a developer runs before pushing (unit, golden, CLI, server)
#   make test-slow  the slow tier (whole-model numerics, tests/py/conftest.py SLOW); CI runs both
#   make test-arm   scripts/setup --arm, cross-compile for aarch64, run the unit tests and golden subset under qemu
#   make asan       build-asan/spindle with AddressSanitizer + UBSan
#   make fuzz       libFuzzer targets (clang)
#   make bench      spindle bench on the default model
#   make install    libspindle.so/.a, spindle.h and spindle.pc under PREFIX (/usr/local)

CC      ?= cc
BUILD   ?= build
# The C libraries come from Debian packages that scripts/setup installs;
# `make` itself installs nothing (the `deps` check below says what to run).
# The library needs JSON, regular expressions and Unicode; the applications
# built on it (the CLI in tools/, the server in server/) add the HTTP
# server library, line editing and the HTTP client of `spindle pull`
# (libcurl), which libspindle never links.
PKGS     := jansson libpcre2-8 libutf8proc
APP_PKGS := libmicrohttpd libedit libcurl libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) $(APP_PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
APP_LIBS   := $(shell pkg-config --libs $(APP_PKGS) 2>/dev/null)

OPT     ?= -O3
ifeq ($(PORTABLE),1)
ARCH    :=
else
ARCH    := -march=native
endif
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
# One set of objects serves the binary, libspindle.a and libspindle.so:
# position-independent, and only what include/spindle.h marks SP_API is
# exported from the shared library.
# No FMA contraction anywhere: every multiply-add is what the source says
# (an explicit fmaf or intrinsic), whatever the target and inlining, so the
# vector rows of each kernel round as the scalar ones, a PORTABLE binary
# computes what a -march=native one does, the batch-invariance contracts
# hold (docs: src/kernels/kernels_isa.h, src/quant/packed.c) and the file
# quantisers reproduce llama.cpp's rounding exactly.
CFLAGS_BASE := -std=gnu11 $(WARN) -g -fno-strict-aliasing -ffp-contract=off -pthread -fPIC -fvisibility=hidden \
               -Iinclude $(PKG_CFLAGS)
# Which headers each part of the tree sees: the library's rooms see each
# other (src/); the applications (tools/, server/) see include/spindle.h and
# their own headers only, so a reach into the library's insides does not
# compile.  Unit tests, fuzzers and the kernel micro-benchmarks in bench/
# test rooms from inside and see src/.
INC_src    := -Isrc
INC_tools  := -I.
INC_server := -I.
CFLAGS  ?= $(OPT) $(ARCH)
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS) -MMD -MP
LDLIBS  := $(PKG_LIBS) -lm -pthread

# Per-ISA translation units get their own flags (after ARCH: they win) and
# are only called after a run-time CPU check (src/core/cpu.c); the files of
# the other architecture compile to nothing.
TARGET_CPU := $(firstword $(subst -, ,$(shell $(CC) -dumpmachine 2>/dev/null)))
ifeq ($(TARGET_CPU),aarch64)
FLAGS_dotprod   := -march=armv8.2-a+dotprod
FLAGS_i8mm      := -march=armv8.6-a+dotprod+i8mm
else
# A level's files get exactly that level (-march=native would let gcc use
# the host's AVX-512 registers in the AVX2 files), so a PORTABLE binary's
# kernels are the native one's.
AVX2_FLAGS   := -march=x86-64-v3 -mtune=generic
AVX512_FLAGS := -march=x86-64-v4 -mtune=generic -mavx512vnni -mavx512bf16
FLAGS_avx2       := $(AVX2_FLAGS)
FLAGS_avxvnni    := $(AVX2_FLAGS) -mavxvnni
FLAGS_avx512     := $(AVX512_FLAGS)
FLAGS_vec_avx2   := $(AVX2_FLAGS)
FLAGS_vec_avx512 := $(AVX512_FLAGS)
endif

LIB_SRC   := $(sort $(wildcard src/*/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
SERVER_SRC := $(sort $(wildcard server/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# The spindle binary: the CLI, the server and the chat page's assets over
# libspindle.a.
APP_OBJ   := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o) $(SERVER_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/webui_assets.o
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test test-slow test-unit test-py asan test-asan test-tsan fuzz fuzz-build fuzz-lib tsan bench clean setup deps tests \
        compile-all xtarget install test-arm
all: $(BUILD)/spindle $(BUILD)/libspindle.so

# Every compile waits for this check: a clear message instead of a missing
# header when the packages are not installed.
deps:
	@pkg-config --exists $(PKGS) $(APP_PKGS) 2>/dev/null || { \
	    echo "make: the C libraries $(PKGS) $(APP_PKGS) are not installed (pkg-config cannot find them);" \
	         "run scripts/setup first (make test and make run run it for you)" >&2; exit 2; }

# Installs the Debian packages and the test venv (idempotent, well under a
# second when all is present).
setup:
	@scripts/setup --quiet

# The sub-makes of run and test use every core, unless the caller gave -j.
NPROC := $(shell nproc 2>/dev/null || echo 1)
JOBS   = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(NPROC))

# Made afresh: `ar r` into an old archive would keep the members of
# sources since renamed or removed.
$(BUILD)/libspindle.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

# The shared library: libspindle.so.MAJOR.MINOR.PATCH with the soname
# libspindle.so.MAJOR (the version comes from include/spindle.h).
SP_VERSION_PART = $(shell sed -n 's/^\#define SPINDLE_VERSION_$(1) \([0-9]*\)$$/\1/p' include/spindle.h)
SOMAJOR := $(call SP_VERSION_PART,MAJOR)
VERSION := $(SOMAJOR).$(call SP_VERSION_PART,MINOR).$(call SP_VERSION_PART,PATCH)
$(BUILD)/libspindle.so: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared -Wl,-soname,libspindle.so.$(SOMAJOR) -Wl,-z,defs -o $@.$(VERSION) $^ $(LDFLAGS) $(LDLIBS)
	ln -sf libspindle.so.$(VERSION) $@.$(SOMAJOR)
	ln -sf libspindle.so.$(SOMAJOR) $@

$(BUILD)/spindle: $(APP_OBJ) $(BUILD)/libspindle.a
	$(CC) $(ALL_CFLAGS) -o $@ $(APP_OBJ) $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS) $(APP_LIBS)

$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(INC_$(firstword $(subst /, ,$*))) $(FLAGS_$(notdir $*)) -c $< -o $@

# A unit test of an application's part links that part's objects too
# (TEST_OBJ_name; the application's headers are found from the root).
TEST_OBJ_test_reasoning := $(BUILD)/obj/server/reasoning.o
.SECONDEXPANSION:
$(BUILD)/tests/%: tests/unit/%.c $$(TEST_OBJ_$$*) $(BUILD)/libspindle.a tests/unit/check.h tests/unit/check_isa.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Isrc -I. -Itests/unit -o $@ $< $(TEST_OBJ_$*) $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BIN)

# The chat page (server/webui.h): its files and the Debian packages'
# marked and DOMPurify as C arrays, NAME:FILE -> sp_webui_NAME[], _len.
WEBUI_FILES := index_html:server/webui/index.html app_js:server/webui/app.js \
               marked_js:/usr/share/javascript/marked/marked.umd.min.js \
               purify_js:/usr/share/nodejs/dompurify/dist/purify.min.js
$(BUILD)/gen/webui_assets.c: $(foreach f,$(WEBUI_FILES),$(word 2,$(subst :, ,$(f))))
	@mkdir -p $(@D)
	@for f in $(WEBUI_FILES); do n=$${f%%:*}; p=$${f#*:}; \
	    printf 'const unsigned char sp_webui_%s[] = {\n' $$n; xxd -i < $$p; \
	    printf ', 0x00};\nconst unsigned long sp_webui_%s_len = %s;\n' $$n $$(wc -c < $$p); \
	done > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/webui_assets.o: $(BUILD)/gen/webui_assets.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# Micro-benchmarks (bench/bench_NAME.c -> $(BUILD)/bench_NAME: attention
# alone, one packed matmul tile), built with the tests so they keep
# compiling; run by hand (docs/performance.md).
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
$(BUILD)/bench_%: bench/bench_%.c $(BUILD)/libspindle.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Isrc -o $@ $< $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

# The spindle side of bench/schemas/run.py (real-world schemas beside
# llguidance; run by hand): an application, so include/spindle.h only.
$(BUILD)/schema_judge: bench/schemas/schema_judge.c $(BUILD)/libspindle.a
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

run:
	@scripts/setup --run --quiet
	@$(MAKE) --no-print-directory $(JOBS) all
	@scripts/demo

# Everything that compiles: library, tools, unit tests, micro-benchmarks.
compile-all: all $(TEST_BIN) $(BENCH_BIN) $(BUILD)/schema_judge

# A second target: -march changes how gcc inlines and vectorises, and with
# that which -Wmaybe-uninitialized style warnings fire, so `make test` also
# compiles everything for a CPU level the host is not (x86-64: AVX2 on an
# AVX-512 host, AVX-512 elsewhere; aarch64: Armv8.6 with i8mm, or plain
# Armv8 on such a host), warnings as errors.  Compiling for a target needs
# no CPU that runs it; nothing built here runs.
HOST_CPU := $(shell uname -m)
ifeq ($(HOST_CPU),aarch64)
XTARGET ?= $(if $(shell grep -qw i8mm /proc/cpuinfo 2>/dev/null && echo y),armv8-a,armv8.6-a+dotprod+i8mm)
else
XTARGET ?= $(if $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo y),x86-64-v3,x86-64-v4)
endif
xtarget:
	@$(MAKE) --no-print-directory BUILD=build/xtarget-$(XTARGET) ARCH=-march=$(XTARGET) compile-all

# aarch64 on an x86-64 host: Debian's cross compiler and arm64 libraries
# (scripts/setup --arm), every unit test under qemu-user on a CPU model with
# every feature (each ISA level's kernels against the scalar reference),
# then every level end to end (test_isa.py), the tokenizer goldens and the
# next-token logits of the short golden prompts of both models (emulation
# runs ~100x slower: the long prompts, the 64-token generations and
# test_spec's sampled chi-square, skipped when SP_TEST_EMULATED is set, stay
# in `make test`).  Like `make test`, setup first and then a fresh make.
ARM_CC     ?= aarch64-linux-gnu-gcc
ARM_BUILD  ?= build-arm
ARM_QEMU   ?= qemu-aarch64-static -cpu max
ARM_PYTEST ?= tests/py/test_isa.py tests/py/test_goldens.py tests/py/test_tokenizer_goldens.py
ARM_PYTEST_ARGS ?= -k "test_isa or test_tokenizer_goldens or (test_next_token_logits and not long)"
ARM_PKG_CONFIG_LIBDIR := /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
test-arm:
	@scripts/setup --arm --quiet
	@PKG_CONFIG_LIBDIR=$(ARM_PKG_CONFIG_LIBDIR) $(MAKE) --no-print-directory CC=$(ARM_CC) BUILD=$(ARM_BUILD) \
	    ARCH=-march=armv8-a compile-all
	@SP_EMULATOR="$(ARM_QEMU)" SP_TEST_EMULATED=1 SP_PYTEST="$(ARM_PYTEST)" PYTEST_ADDOPTS='$(ARM_PYTEST_ARGS)' \
	    scripts/run-tests $(ARM_BUILD)

# scripts/setup first, then a fresh make that sees what it installed.
test: setup
	@$(MAKE) --no-print-directory $(JOBS) compile-all xtarget
	@echo "make test: compiled for the host (-march=native) and for -march=$(XTARGET)"
	@scripts/run-tests $(BUILD)

# The slow tier alone (pytest -m slow against build/spindle).
test-slow: setup
	@$(MAKE) --no-print-directory $(JOBS) all
	@SP_PYTEST_MARK=slow scripts/run-tests $(BUILD) py

test-unit: all $(TEST_BIN)
	@scripts/run-tests $(BUILD) unit

asan:
	$(MAKE) BUILD=build-asan OPT=-O2 CFLAGS="-O2 $(ARCH) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" LDFLAGS="-fsanitize=address,undefined" build-asan/spindle tests

# Every unit test and the pytest suite against build-asan/spindle.  Sanitizer
# reports abort the process (-fno-sanitize-recover, ASan's default), so any
# report fails the test that triggered it.  ASAN_PYTEST_ARGS deselects the
# heaviest golden tests (long 2-model logit comparisons that take minutes each
# under ASan on 2 cores; the plain build runs them in `make test`): see
# docs/reliability.md for the timings behind the choice.  Likewise the
# whole-model quantization and perplexity comparisons (minutes of float work
# each under ASan; the tiny-model quantization tests and the bad-input tests
# still run; so do the quantized caches' text checks), and the memory
# predictions, which ASan's shadow memory and quarantine make meaningless.
# Where one case exercises the code another repeats with other numbers, one
# runs: of each family's file only the long prompt's logits and greedy
# continuation (the most positions and cache blocks) on F32 and Q4_K (the
# quantized rows' other type, Q8_0, runs the same loader and forward code;
# its kernels stay in the unit tests and test_isa; of gpt-oss's copies the
# F32 and MXFP4 ones), the goldens' short
# prompts, and the tool-call, schema, speculation and embedding tests on
# SmolLM2 alone (their Gemma 3 twins run the same server, grammar and draft
# code; Gemma 3's own paths stay in test_isa, test_kv_cache and the
# tokenizer goldens), the trailing-dimensions-of-one loads of three
# families (one shape check serves every family's tensors), of the
# converter-layout variants Gemma 4's fused experts (DeepSeek's extra
# multi-token-prediction layer, and DeepSeek's whole-model quantizations,
# are the plain build's; test_gguf loads a nextn layer here), and of the lazy
# tool-call tests one city per template (the others repeat the same path
# with other words).  Of the embedding-turn tests the two large batches
# (3 and 3 minutes under ASan on 2 cores) are the plain build's: the chunked
# embedding path, its cancellation and the drain's 503 still run here.  So
# is Llama 4's prompt across its 8192-position attention chunk (an
# 8,320-token prompt per file: about 15 s each in the plain build); its
# short prompts run here, through the same chunk rule and expert code.
# test_spec's sampled chi-square (about 2,000 speculative samples: the
# longest unit binary under ASan, minutes on 2 cores) runs in the plain
# build, as under emulation (SP_TEST_SANITIZED); the sampled speculation
# paths stay here in test_speculative.py.
# test_file_descriptor_limit runs the server under
# `ulimit -n 64`, which ASan's own descriptors and slower start do not fit;
# the plain build and TSan run it.  Of the split-model tests the whole-model
# comparisons (quantizing twice, greedy runs and full logits: the same
# forward pass over the same bytes) are the plain build's; loading the
# parts, info, serving and the refusals run here.  The linear families'
# draft-model roll back runs on qwen3next alone (the others' state rolls
# back through the same memory code), and test_hybrid skips qwen35moe
# (qwen35's layers with qwen2moe's experts, both covered) and granitehybrid-moe
# (granitehybrid's layers with experts and llama4's ungated shared expert; its
# refusal and its two loading tests run).  The build is -O2: the
# same checks, about 1.2x faster than -O1.
ASAN_PYTEST_ARGS ?= -k "not (test_goldens and (gemma3 or teacher or long)) and not test_smollm2_matches_llama_cpp \
    and not test_perplexity_matches_llama_cpp and not test_imatrix_brings_q3_closer and not test_info_predicts \
    and not test_kl_of_a_model_with_itself_is_zero and not test_quantized_cache_perplexity_stays_close \
    and not (test_families and (test_tokens_and_logits_at_every_position or test_greedy_continuation) and (q8_0 or not long)) \
    and not (test_trailing_dimensions_of_one_are_the_same_shape and not (llama3 or qwen35 or qwen2moe)) \
    and not (test_families and gpt-oss and (q8_0 or q4_k)) \
    and not (test_quantize_matches_llama_cpp and deepseek2) and not (test_converter_layout_variants and deepseek2) \
    and not ((test_tools or test_structured or test_speculative or test_embed) and gemma3) \
    and not (test_tools_lazy and (Tokyo or Lima)) \
    and not test_file_descriptor_limit and not test_drain_delivers_finished_vectors \
    and not test_streams_go_on_while_a_large_batch_is_embedded and not test_chunked_attention_across_a_chunk \
    and not test_quantize_reads_the_parts and not test_split_runs_as_the_single_file \
    and not (test_draft_rollback_keeps_greedy_exact and not qwen3next) and not (test_hybrid and (qwen35moe or granitehybrid-moe))"
test-asan: asan
	@PYTEST_ADDOPTS='$(ASAN_PYTEST_ARGS)' ASAN_OPTIONS=detect_leaks=1 SP_TEST_SANITIZED=1 \
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
TSAN_TESTS := tests/py/test_server.py tests/py/test_server_failures.py tests/py/test_server_faults.py \
              tests/py/test_server_defaults.py tests/py/test_server_replica.py tests/py/test_server_admission.py \
              tests/py/test_server_connections.py tests/py/test_server_embed_turns.py tests/py/test_server_models.py
# Of the embedding-turn tests the two large batches are the plain build's
# (minutes of embedding under TSan's scheduling); the chunked path, its
# cancellation and the drain's 503 run the same threads here.
TSAN_PYTEST_ARGS ?= -k "not test_drain_delivers_finished_vectors and not test_streams_go_on_while_a_large_batch_is_embedded"
test-tsan: tsan
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" SPINDLE=$(CURDIR)/build-tsan/spindle \
	    build/venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 $(TSAN_PYTEST_ARGS) $(TSAN_TESTS)

# libFuzzer targets: tests/fuzz/fuzz_NAME.c, seeds in tests/fuzz/corpus/NAME/.
# clang-16 (Debian 12): clang-14 cannot compile _Float16 on x86-64.
FUZZ_CC      ?= clang-16
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 40
FUZZ_CFLAGS  := -O1 -g $(ARCH) -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# The library and the server's objects are built by a sub-make (its own
# BUILD dir and flags); the server's request parser (fuzz_request) comes
# from an archive of them, so a target pulls only what it calls.  The
# targets relink every time, which takes a second.
FUZZ_SERVER := build-fuzz/spindle-server.a
fuzz-lib:
	$(MAKE) CC=$(FUZZ_CC) BUILD=build-fuzz CFLAGS="$(FUZZ_CFLAGS)" build-fuzz/libspindle.a \
	    $(SERVER_SRC:%.c=build-fuzz/obj/%.o) build-fuzz/obj/gen/webui_assets.o
	@rm -f $(FUZZ_SERVER)
	$(AR) rcs $(FUZZ_SERVER) $(SERVER_SRC:%.c=build-fuzz/obj/%.o) build-fuzz/obj/gen/webui_assets.o

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c fuzz-lib
	$(FUZZ_CC) $(CFLAGS_BASE) -Isrc -I. $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_SERVER) \
	    build-fuzz/libspindle.a $(LDLIBS) $(APP_LIBS)

fuzz-build: $(FUZZ_BIN)

# Runs every target for FUZZ_SECONDS; findings land in build-fuzz/findings/.
fuzz: fuzz-build
	@scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_BIN)

# make install PREFIX=... [DESTDIR=...]: the libraries, the header and a
# pkg-config file (cc prog.c $(pkg-config --cflags --libs spindle)).
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
install: $(BUILD)/libspindle.so $(BUILD)/libspindle.a $(BUILD)/spindle
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR)
	install -m 755 $(BUILD)/spindle $(DESTDIR)$(BINDIR)/spindle
	install -m 644 include/spindle.h $(DESTDIR)$(INCLUDEDIR)/spindle.h
	install -m 644 $(BUILD)/libspindle.a $(DESTDIR)$(LIBDIR)/libspindle.a
	install -m 755 $(BUILD)/libspindle.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libspindle.so.$(VERSION)
	ln -sf libspindle.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libspindle.so.$(SOMAJOR)
	ln -sf libspindle.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libspindle.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
	    spindle.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/spindle.pc

bench: all
	@$(BUILD)/spindle bench -m $$(scripts/fetch-model smollm2-135m)

clean:
	rm -rf build/obj build/gen build/libspindle.a build/libspindle.so* build/spindle build/tests build/xtarget-* build-asan build-arm

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d)
