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
# run-time CPU check (src/core/cpu.c).
AVX2_FLAGS   := -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

LIB_SRC   := $(sort $(wildcard src/*/*.c))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN  := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test test-unit test-py asan test-asan fuzz fuzz-build bench clean setup deps tests
all: $(BUILD)/spindle

deps: ;

$(BUILD)/libspindle.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/spindle: $(TOOL_OBJ) $(BUILD)/libspindle.a
	$(CC) $(ALL_CFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(if $(findstring avx512,$<),$(AVX512_FLAGS),$(if $(findstring avx2,$<),$(AVX2_FLAGS))) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libspindle.a tests/unit/check.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests/unit -o $@ $< $(BUILD)/libspindle.a $(LDFLAGS) $(LDLIBS)

tests: $(TEST_BIN)

run: all
	@scripts/demo

test: all $(TEST_BIN)
	@scripts/run-tests $(BUILD)

test-unit: all $(TEST_BIN)
	@scripts/run-tests $(BUILD) unit

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 CFLAGS="-O1 $(ARCH) -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" LDFLAGS="-fsanitize=address,undefined" build-asan/spindle tests


test-asan: asan
	@SP_SANITIZED=1 scripts/run-tests build-asan unit

# libFuzzer targets: tests/fuzz/fuzz_NAME.c, seeds in tests/fuzz/corpus/NAME/.
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS  := -O1 -g $(ARCH) -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer

build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c
	$(MAKE) CC=clang BUILD=build-fuzz CFLAGS="$(FUZZ_CFLAGS)" build-fuzz/libspindle.a
	clang $(CFLAGS_BASE) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< build-fuzz/libspindle.a $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

# Runs every target for FUZZ_SECONDS; findings land in build-fuzz/findings/.
fuzz: fuzz-build
	@scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_BIN)

bench: all
	@$(BUILD)/spindle bench -m $$(scripts/fetch-model smollm2-135m)

clean:
	rm -rf build/obj build/libspindle.a build/spindle build/tests build-asan

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
