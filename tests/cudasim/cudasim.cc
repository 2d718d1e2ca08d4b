// cudasim.cc — a CPU emulation of the part of CUDA that ringlm's CUDA backend uses, so the
// backend (its kernels, host code, graphs and cuBLAS calls, unchanged) runs its GPU tests on
// a machine without a GPU. It is a test tool: it checks logic (indexing, barriers, warp
// exchanges, stream order, capture rules, argument checks), not speed or the hardware's
// memory model, and a pass here is not a pass on a GPU (tests/cudasim/README.md).
//
// Execution model
// - Device memory is host memory from aligned_alloc, registered so copies, memsets, kernel
//   pointer arguments and cuBLAS operands are checked to lie in one allocation (a host
//   pointer handed to a kernel is an error), and filled with 0xff (NaN as fp32 and bf16) so a
//   read of memory nothing wrote shows up.
// - Work is deferred, as on a GPU: every async call appends to one queue in call order, and
//   the queue runs only when the host waits (stream/event/device synchronize, a synchronous
//   copy) or polls: cudaEventQuery on pending work answers cudaErrorNotReady once, then runs
//   the queue up to the event. A host that reuses a buffer before the copy reading it has
//   run therefore sees the wrong data, as it would on a GPU.
// - Graph capture records a stream's work (kernels with their arguments by value, copies
//   reading their source at replay, cuBLAS calls with alpha/beta read at capture); a
//   synchronizing call during capture fails it, as CUDA does. Replay enqueues the recording.
// - Kernels: blocks run one after another; a block's threads are fibers on this CPU thread
//   (a small x86-64 context switch, ucontext elsewhere) that switch only at __syncthreads and
//   warp exchanges, so each barrier is checked: every live thread of the block must reach the
//   same call site, a thread may not exit while others wait, and a shuffle's mask must name
//   live lanes arriving together. Violations, deadlocks and bad launch configurations print
//   one line naming the kernel and become the sticky cudaErrorLaunchFailure.
// - cuBLAS GemmEx: column-major C = alpha op(A) op(B) + beta C in fp32, with cuBLAS's checks
//   of ld*, types and pointers; beta == 0 never reads C.
//
// Environment: CUDASIM_ORDER=fwd|rev|alt (thread order between barriers; default alt: even
// blocks forward, odd blocks reverse), CUDASIM_SMS (multiprocessor count, default 4),
// CUDASIM_MEM_MB (device memory, default 8192), CUDASIM_DEVICES=0 (no device),
// CUDASIM_TRACE=1 (one line per kernel run).
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
// ASan must be told about every stack switch, or it takes fiber stacks for overflows
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)0)
#define ASAN_FINISH(save, bottom, size) ((void)0)
#endif
#include "cuda_runtime_api.h"
#include "cublas_v2.h"
#include "cudasim_device.h"

// ------------------------------------------------------------------ state -------------

static std::recursive_mutex mu;                    // one CPU "device": every call serialised
typedef std::lock_guard<std::recursive_mutex> guard;
static cudaError_t sticky = cudaSuccess;           // a failed kernel poisons the context
static cudaError_t last_err = cudaSuccess;

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess && last_err == cudaSuccess)
		last_err = e;
	return e;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cudasim: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static long env_long(const char *name, long def)
{
	const char *s = getenv(name);
	return s && *s ? strtol(s, NULL, 10) : def;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// ------------------------------------------------------------------ allocations -------

struct alloc { size_t size; bool device; };
static std::map<uintptr_t, alloc> allocs;          // base -> size, device or pinned host
static size_t dev_used;

// The allocation holding [p, p + n), or NULL.
static const alloc *find(const void *p, size_t n, uintptr_t *base)
{
	uintptr_t a = (uintptr_t)p;
	auto it = allocs.upper_bound(a);
	if (it == allocs.begin())
		return NULL;
	--it;
	if (a - it->first > it->second.size || n > it->second.size - (a - it->first))
		return NULL;
	if (base)
		*base = it->first;
	return &it->second;
}

static bool is_dev(const void *p, size_t n)
{
	const alloc *a = find(p, n, NULL);
	return a && a->device;
}

// ------------------------------------------------------------------ streams, queue ----

struct cudasim_node { enum cudaGraphNodeType type; };
struct cudasim_graph {
	std::vector<std::function<void()>> ops;
	std::vector<cudasim_node> nodes;               // ops[i]'s type (cudaGraphGetNodes)
};
struct cudasim_stream {
	unsigned flags;
	cudasim_graph *capture;                        // recording, or NULL
	bool capture_failed;
};
struct cudasim_event {
	unsigned flags;
	uint64_t pending;                              // queue sequence of its record, 0 if none
	bool polled;                                   // NotReady already answered once
	double t_ms;                                   // when its record ran
};

struct op { uint64_t seq; cudaStream_t st; std::function<void()> fn; };
static std::deque<op> queue;
static uint64_t next_seq = 1, done_seq = 0;
static cudasim_stream *capturing;                  // the stream being captured (one at a time)

// Runs queued work in call order up to and including sequence `upto`.
static void run_until(uint64_t upto)
{
	while (!queue.empty() && queue.front().seq <= upto) {
		op o = std::move(queue.front());
		queue.pop_front();
		if (sticky == cudaSuccess)
			o.fn();
		done_seq = o.seq;
	}
}
static void run_all(void) { run_until(UINT64_MAX); }

// A synchronising call: legal only when nothing is being captured (CUDA's rule for
// "potentially unsafe" calls in global and thread-local capture modes).
static cudaError_t sync_allowed(const char *what)
{
	if (!capturing)
		return cudaSuccess;
	report("%s during stream capture invalidates the capture", what);
	capturing->capture_failed = true;
	return cudaErrorStreamCaptureUnsupported;
}

// Appends fn to stream st's work (or to its capture, as a node of that type). Returns the
// sequence (0 if captured).
static uint64_t enqueue(cudaStream_t st, std::function<void()> fn,
			enum cudaGraphNodeType type = cudaGraphNodeTypeKernel)
{
	if (st && st->capture) {
		st->capture->ops.push_back(std::move(fn));
		st->capture->nodes.push_back({ type });
		return 0;
	}
	uint64_t s = next_seq++;
	queue.push_back({ s, st, std::move(fn) });
	return s;
}

static cudaError_t check_enqueue(cudaStream_t st)
{
	if (sticky != cudaSuccess)
		return sticky;
	if (capturing && !st) {                        // legacy stream while another captures
		capturing->capture_failed = true;
		return cudaErrorStreamCaptureImplicit;
	}
	return cudaSuccess;
}

// ------------------------------------------------------------------ fibers ------------

#define STACK_BYTES (256u << 10)
#define MAX_THREADS 1024

#if defined(__x86_64__)
// switch_to(&save, to): saves callee-saved registers and the stack pointer in *save, loads
// `to` (a stack made by fiber_make or saved here) and returns on it.
extern "C" void cudasim_switch(void **save, void *to);
__asm__(".text\n.globl cudasim_switch\n.type cudasim_switch,@function\ncudasim_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret\n"
	".size cudasim_switch, .-cudasim_switch\n");
#endif

enum { F_RUN, F_BAR, F_WARP, F_DONE };
struct fiber {
	char *stack;                                   // STACK_BYTES, a guard page below
	int state;
	unsigned tid;
	unsigned xphase;                               // exchanges done, mod 2
	void *asan_fake;                               // ASan's fake stack while switched out
	uint3 idx;
#if defined(__x86_64__)
	void *sp;
#else
	ucontext_t uc;
#endif
};

static fiber fibers[MAX_THREADS];
static int n_fib, n_live, cur_fib;
#if defined(__x86_64__)
static void *sched_sp;
#else
static ucontext_t sched_uc;
#endif
static const std::function<void()> *cur_body;
static const char *cur_kernel;
static bool block_failed;

// block barrier
static int bar_count;
static const char *bar_file;
static int bar_line;
// warp exchanges: per warp, lanes arrived at the current exchange and their values
// val is double-buffered by exchange parity: a lane writes exchange n+2's value only after
// every lane passed exchange n+1's barrier, so everyone has read exchange n's by then.
struct warp_state { unsigned arrived, mask; uint64_t val[2][32]; };
static warp_state warps[MAX_THREADS / 32];

// dynamic shared memory of the launch, 128-byte aligned like the GPU's shared window
struct dyn_buf {
	unsigned char *p = NULL;
	size_t n = 0;
	bool empty() const { return !n; }
	size_t size() const { return n; }
	unsigned char *data() { return p; }
	void assign(size_t bytes, unsigned char v)
	{
		free(p);
		n = bytes;
		p = bytes ? (unsigned char *)aligned_alloc(128, (bytes + 127) & ~(size_t)127) : NULL;
		if (p)
			memset(p, v, bytes);
	}
};
static dyn_buf dyn;

extern "C" {
uint3 cudasim_threadIdx, cudasim_blockIdx;
dim3 cudasim_blockDim, cudasim_gridDim;
}

static void fail_block(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const void *sched_stack_bottom __attribute__((unused));   // the scheduler's stack, for ASan
static size_t sched_stack_size __attribute__((unused));

// Back to the scheduler; `last`: this fiber never runs again (ASan frees its fake stack).
static void switch_to_sched(bool last)
{
	(void)last;
	ASAN_START(last ? NULL : &fibers[cur_fib].asan_fake, sched_stack_bottom, sched_stack_size);
#if defined(__x86_64__)
	cudasim_switch(&fibers[cur_fib].sp, sched_sp);
#else
	swapcontext(&fibers[cur_fib].uc, &sched_uc);
#endif
	ASAN_FINISH(fibers[cur_fib].asan_fake, &sched_stack_bottom, &sched_stack_size);
}

static void yield_to_sched(void) { switch_to_sched(false); }

static void fiber_main(void)
{
	ASAN_FINISH(NULL, &sched_stack_bottom, &sched_stack_size);
	(*cur_body)();
	fiber *f = &fibers[cur_fib];
	f->state = F_DONE;
	n_live--;
	if (bar_count > 0 && !block_failed)
		fail_block("thread %u exited while %d others wait at __syncthreads (%s:%d)", f->tid,
			   bar_count, bar_file, bar_line);
	warp_state *ws = &warps[f->tid >> 5];
	if (ws->arrived && (ws->mask >> (f->tid & 31) & 1) && !block_failed)
		fail_block("lane %u exited while its warp waits at an exchange whose mask %#x names it",
			   f->tid & 31, ws->mask);
	switch_to_sched(true);
	abort();                                       // never resumed
}

static void fiber_make(fiber *f)
{
	if (!f->stack) {
		char *m = (char *)mmap(NULL, STACK_BYTES + 4096, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			report("cannot map a fiber stack");
			abort();
		}
		mprotect(m, 4096, PROT_NONE);          // overflow faults instead of corrupting
		f->stack = m + 4096;
	}
#if defined(__x86_64__)
	void **top = (void **)(f->stack + STACK_BYTES);
	*--top = NULL;                                 // fiber_main's "return address"
	*--top = (void *)fiber_main;                   // where cudasim_switch returns to
	for (int i = 0; i < 6; i++)
		*--top = NULL;                         // rbp rbx r12 r13 r14 r15
	f->sp = top;
#else
	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = STACK_BYTES;
	f->uc.uc_link = NULL;
	makecontext(&f->uc, fiber_main, 0);
#endif
}

static void fail_block(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	report("kernel %s, block (%u,%u,%u): %s", cur_kernel, cudasim_blockIdx.x, cudasim_blockIdx.y,
	       cudasim_blockIdx.z, msg);
	block_failed = true;
}

// Parks the current thread (state already set) until another releases it; a failed block
// parks everyone for good.
static void park(void)
{
	yield_to_sched();
}

extern "C" void cudasim_syncthreads(const char *file, int line)
{
	fiber *f = &fibers[cur_fib];
	if (block_failed) {
		f->state = F_BAR;
		park();
	}
	if (n_live < n_fib) {
		fail_block("__syncthreads at %s:%d after %d thread(s) of the block exited", file, line,
			   n_fib - n_live);
		f->state = F_BAR;
		park();
	}
	if (bar_count == 0) {
		bar_file = file;
		bar_line = line;
	} else if (bar_line != line || strcmp(bar_file, file)) {
		fail_block("threads wait at different __syncthreads: %s:%d and %s:%d", bar_file,
			   bar_line, file, line);
		f->state = F_BAR;
		park();
	}
	f->state = F_BAR;
	if (++bar_count == n_live) {                   // last to arrive releases the block
		bar_count = 0;
		for (int i = 0; i < n_fib; i++)
			if (fibers[i].state == F_BAR)
				fibers[i].state = F_RUN;
		return;
	}
	park();
}

extern "C" int cudasim_lane_id(void) { return (int)(fibers[cur_fib].tid & 31); }

// Warp barrier among the lanes of mask: the last lane to arrive releases the others.
static void warp_barrier(unsigned mask, const char *what)
{
	fiber *f = &fibers[cur_fib];
	unsigned w = f->tid >> 5, lane = f->tid & 31;
	warp_state *ws = &warps[w];
	if (!(mask >> lane & 1))
		fail_block("%s by lane %u, which its mask %#x leaves out", what, lane, mask);
	for (unsigned l = 0; l < 32 && !block_failed && !ws->arrived; l++) {   /* first arrival checks */
		if (!(mask >> l & 1))
			continue;
		unsigned t = w * 32 + l;
		if (t >= (unsigned)n_fib || fibers[t].state == F_DONE)
			fail_block("%s with mask %#x names lane %u, which %s", what, mask, l,
				   t >= (unsigned)n_fib ? "does not exist" : "has exited");
	}
	if (ws->arrived && ws->mask != mask)
		fail_block("%s: lanes of warp %u arrive with masks %#x and %#x", what, w, ws->mask, mask);
	if (block_failed) {
		f->state = F_WARP;
		park();
	}
	ws->mask = mask;
	ws->arrived |= 1u << lane;
	f->state = F_WARP;
	if (ws->arrived == mask) {
		ws->arrived = 0;
		for (unsigned l = 0; l < 32; l++)
			if (mask >> l & 1)
				fibers[w * 32 + l].state = F_RUN;
		return;
	}
	park();
}

extern "C" uint64_t cudasim_shfl(unsigned mask, uint64_t v, int src, const char *what)
{
	fiber *f = &fibers[cur_fib];
	unsigned w = f->tid >> 5, ph = f->xphase;
	warp_state *ws = &warps[w];
	ws->val[ph][f->tid & 31] = v;
	warp_barrier(mask, what);                      // every lane has published
	f->xphase ^= 1;
	return (mask >> src & 1) ? ws->val[ph][src] : v;
}

extern "C" void cudasim_syncwarp(unsigned mask) { warp_barrier(mask, "__syncwarp"); }

extern "C" void *cudasim_dyn_smem(void) { return dyn.empty() ? NULL : dyn.data(); }

static int order_mode(void)
{
	static int mode = -1;
	if (mode < 0) {
		const char *s = getenv("CUDASIM_ORDER");
		mode = s && !strcmp(s, "fwd") ? 0 : s && !strcmp(s, "rev") ? 1 : 2;
	}
	return mode;
}

// Runs one block to completion; false when it failed.
static bool run_block(unsigned nthreads, bool reverse)
{
	n_fib = (int)nthreads;
	n_live = n_fib;
	bar_count = 0;
	bar_file = NULL;
	bar_line = 0;
	memset(warps, 0, sizeof warps);
	if (!dyn.empty())
		memset(dyn.data(), 0xff, dyn.size());
	for (int i = 0; i < n_fib; i++) {
		fiber *f = &fibers[i];
		f->state = F_RUN;
		f->tid = (unsigned)i;
		f->xphase = 0;
		f->idx.x = (unsigned)i % cudasim_blockDim.x;
		f->idx.y = (unsigned)i / cudasim_blockDim.x % cudasim_blockDim.y;
		f->idx.z = (unsigned)i / (cudasim_blockDim.x * cudasim_blockDim.y);
		fiber_make(f);
	}
	while (n_live > 0 && !block_failed) {
		bool ran = false;
		for (int k = 0; k < n_fib && !block_failed; k++) {
			int i = reverse ? n_fib - 1 - k : k;
			if (fibers[i].state != F_RUN)
				continue;
			ran = true;
			cur_fib = i;
			cudasim_threadIdx = fibers[i].idx;
			void *fake = NULL;
			(void)fake;
			ASAN_START(&fake, fibers[i].stack, STACK_BYTES);
#if defined(__x86_64__)
			cudasim_switch(&sched_sp, fibers[i].sp);
#else
			swapcontext(&sched_uc, &fibers[i].uc);
#endif
			ASAN_FINISH(fake, NULL, NULL);
		}
		if (!ran && !block_failed) {
			int bar = 0, wp = 0;
			for (int i = 0; i < n_fib; i++)
				bar += fibers[i].state == F_BAR, wp += fibers[i].state == F_WARP;
			fail_block("deadlock: %d thread(s) at __syncthreads (%s:%d), %d at a warp exchange",
				   bar, bar_file ? bar_file : "?", bar_line, wp);
		}
	}
	return !block_failed;
}

static std::map<const void *, int> max_dyn_smem;   // cudaFuncSetAttribute opt-ins

static void run_grid(const char *name, const cudasim::cfg &c, const std::function<void()> &body)
{
	if (env_long("CUDASIM_TRACE", 0))
		report("run %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu", name, c.g.x, c.g.y, c.g.z,
		       c.b.x, c.b.y, c.b.z, c.smem);
	cur_body = &body;
	cur_kernel = name;
	block_failed = false;
	dyn.assign(c.smem, 0xff);
	cudasim_gridDim = c.g;
	cudasim_blockDim = c.b;
	unsigned nthreads = c.b.x * c.b.y * c.b.z;
	uint64_t b = 0;
	for (unsigned z = 0; z < c.g.z; z++)
		for (unsigned y = 0; y < c.g.y; y++)
			for (unsigned x = 0; x < c.g.x; x++, b++) {
				cudasim_blockIdx = { x, y, z };
				int mode = order_mode();
				if (!run_block(nthreads, mode == 1 || (mode == 2 && (b & 1)))) {
					sticky = cudaErrorLaunchFailure;
					return;
				}
			}
}

void cudasim_submit_kernel(const char *name, const void *fn, const cudasim::cfg &c,
			   std::function<void()> body, const void *const *ptrs, int nptrs)
{
	guard g(mu);
	cudaError_t e = check_enqueue(c.st);
	if (e != cudaSuccess) {
		ret(e);
		return;
	}
	unsigned long long nthreads = (unsigned long long)c.b.x * c.b.y * c.b.z;
	int limit = 48 << 10;
	auto it = max_dyn_smem.find(fn);
	if (it != max_dyn_smem.end())
		limit = it->second;
	const char *bad = NULL;
	if (!c.g.x || !c.g.y || !c.g.z || c.g.y > 65535 || c.g.z > 65535 || c.g.x > 0x7fffffffu)
		bad = "grid dimensions";
	else if (!nthreads || nthreads > MAX_THREADS || c.b.z > 64)
		bad = "block dimensions";
	else if (c.smem > (size_t)limit)
		bad = "dynamic shared memory above the limit (48 KiB without cudaFuncSetAttribute)";
	if (bad) {
		report("launch of %s: invalid configuration (%s): grid (%u,%u,%u) block (%u,%u,%u) smem %zu",
		       name, bad, c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z, c.smem);
		ret(cudaErrorInvalidConfiguration);
		return;
	}
	for (int i = 0; i < nptrs; i++)
		if (ptrs[i] && !is_dev(ptrs[i], 0)) {
			report("launch of %s: pointer argument %d (%p) is not device memory", name, i, ptrs[i]);
			ret(cudaErrorInvalidValue);
			return;
		}
	cudasim::cfg cc = c;
	enqueue(c.st, [name, cc, body]() { run_grid(name, cc, body); });
}

// ------------------------------------------------------------------ runtime API -------

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = (int)env_long("CUDASIM_DEVICES", 1);
	return *count ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
	int n;
	if (device < 0 || cudaGetDeviceCount(&n) != cudaSuccess || device >= n)
		return ret(cudaErrorInvalidValue);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "cudasim (CPU emulation, not a GPU)");
	p->totalGlobalMem = (size_t)env_long("CUDASIM_MEM_MB", 8192) << 20;
	p->sharedMemPerBlock = 48 << 10;
	p->sharedMemPerBlockOptin = 227 << 10;
	p->warpSize = 32;
	p->maxThreadsPerBlock = MAX_THREADS;
	p->multiProcessorCount = (int)env_long("CUDASIM_SMS", 4);
	p->major = 9;
	p->minor = 0;
	p->memoryClockRate = 1000000;
	p->memoryBusWidth = 64;
	p->l2CacheSize = 1 << 20;
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) { *version = 0; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *version) { *version = 0; return cudaSuccess; }

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : ret(cudaErrorInvalidValue); }
cudaError_t cudaGetDevice(int *device) { *device = 0; return cudaSuccess; }

cudaError_t cudaGetLastError(void)
{
	guard g(mu);
	cudaError_t e = last_err != cudaSuccess ? last_err : sticky;
	last_err = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	guard g(mu);
	return last_err != cudaSuccess ? last_err : sticky;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
	case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
	case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
	}
	return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorLaunchFailure: return "unspecified launch failure (cudasim: see its message above)";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
	default: return cudaGetErrorName(e);
	}
}

cudaError_t cudaDeviceSynchronize(void)
{
	guard g(mu);
	cudaError_t e = sync_allowed("cudaDeviceSynchronize");
	if (e != cudaSuccess)
		return ret(e);
	run_all();
	return sticky;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	guard g(mu);
	*p = NULL;
	if (capturing) {
		sync_allowed("cudaMalloc");
		return ret(cudaErrorStreamCaptureUnsupported);
	}
	size_t cap = (size_t)env_long("CUDASIM_MEM_MB", 8192) << 20, n = (bytes + 255) & ~(size_t)255;
	if (!n)
		n = 256;
	if (dev_used + n > cap)
		return ret(cudaErrorMemoryAllocation);
	void *m = aligned_alloc(256, n);
	if (!m)
		return ret(cudaErrorMemoryAllocation);
	memset(m, 0xff, n);                            // "uninitialised": NaN in fp32 and bf16
	allocs[(uintptr_t)m] = { bytes, true };
	dev_used += n;
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	guard g(mu);
	if (!p)
		return cudaSuccess;
	run_all();                                     // cudaFree synchronises the device
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end() || !it->second.device) {
		report("cudaFree of %p, which cudaMalloc did not return", p);
		return ret(cudaErrorInvalidDevicePointer);
	}
	dev_used -= (it->second.size + 255) & ~(size_t)255;
	allocs.erase(it);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	guard g(mu);
	*p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
	if (!*p)
		return ret(cudaErrorMemoryAllocation);
	allocs[(uintptr_t)*p] = { bytes, false };
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	(void)flags;
	return cudaMallocHost(p, bytes);
}

cudaError_t cudaFreeHost(void *p)
{
	guard g(mu);
	if (!p)
		return cudaSuccess;
	run_all();
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end() || it->second.device) {
		report("cudaFreeHost of %p, which cudaMallocHost did not return", p);
		return ret(cudaErrorInvalidValue);
	}
	allocs.erase(it);
	free(p);
	return cudaSuccess;
}

// Checks a copy's pointers against its kind: device sides must lie inside one allocation.
static cudaError_t check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, const char *what)
{
	bool dd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice;
	bool sd = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDeviceToHost;
	if (kind == cudaMemcpyDefault) {
		dd = is_dev(dst, 0);
		sd = is_dev(src, 0);
	}
	if (kind > cudaMemcpyDefault || (dd && !is_dev(dst, n)) || (sd && !is_dev(src, n)) ||
	    (!dd && is_dev(dst, 0)) || (!sd && is_dev(src, 0))) {
		report("%s of %zu bytes from %p to %p (kind %d): a pointer does not match the kind or the range leaves its allocation",
		       what, n, src, dst, (int)kind);
		return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	guard g(mu);
	cudaError_t e = sync_allowed("cudaMemcpy");
	if (e == cudaSuccess)
		e = check_copy(dst, src, n, kind, "cudaMemcpy");
	if (e != cudaSuccess)
		return ret(e);
	run_all();
	if (sticky != cudaSuccess)
		return sticky;
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t st)
{
	guard g(mu);
	cudaError_t e = check_enqueue(st);
	if (e == cudaSuccess)
		e = check_copy(dst, src, n, kind, "cudaMemcpyAsync");
	if (e != cudaSuccess)
		return ret(e);
	enqueue(st, [dst, src, n]() { memmove(dst, src, n); }, cudaGraphNodeTypeMemcpy);   // reads src when it runs
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
	guard g(mu);
	cudaError_t e = sync_allowed("cudaMemset");
	if (e != cudaSuccess)
		return ret(e);
	if (!is_dev(p, n)) {
		report("cudaMemset of %zu bytes at %p outside device memory", n, p);
		return ret(cudaErrorInvalidValue);
	}
	run_all();
	memset(p, v, n);
	return sticky;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st)
{
	guard g(mu);
	cudaError_t e = check_enqueue(st);
	if (e != cudaSuccess)
		return ret(e);
	if (!is_dev(p, n)) {
		report("cudaMemsetAsync of %zu bytes at %p outside device memory", n, p);
		return ret(cudaErrorInvalidValue);
	}
	enqueue(st, [p, v, n]() { memset(p, v, n); }, cudaGraphNodeTypeMemset);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags)
{
	*st = new cudasim_stream{ flags, NULL, false };
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *st) { return cudaStreamCreateWithFlags(st, 0); }

// Runs the queue until no work of st is left in it.
static void drain_stream(cudaStream_t st)
{
	uint64_t last = 0;
	for (const op &o : queue)
		if (o.st == st)
			last = o.seq;
	run_until(last);
}

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
	guard g(mu);
	if (!st)
		return ret(cudaErrorInvalidResourceHandle);
	drain_stream(st);
	if (capturing == st)
		capturing = NULL;
	delete st->capture;
	delete st;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
	guard g(mu);
	cudaError_t e = sync_allowed("cudaStreamSynchronize");
	if (e != cudaSuccess)
		return ret(e);
	if (st)
		drain_stream(st);
	else
		run_all();
	return sticky;
}

cudaError_t cudaStreamQuery(cudaStream_t st)
{
	guard g(mu);
	cudaError_t e = sync_allowed("cudaStreamQuery");
	if (e != cudaSuccess)
		return ret(e);
	for (const op &o : queue)
		if (!st || o.st == st) {
			drain_stream(st);
			return cudaErrorNotReady;
		}
	return sticky;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	*e = new cudasim_event{ flags, 0, false, 0.0 };
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	guard g(mu);
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	// work may still reference it: run up to its record first
	if (e->pending > done_seq)
		run_until(e->pending);
	delete e;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st)
{
	guard g(mu);
	cudaError_t err = check_enqueue(st);
	if (err != cudaSuccess)
		return ret(err);
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	uint64_t seq = enqueue(st, [e]() { e->t_ms = now_ms(); }, cudaGraphNodeTypeEventRecord);
	if (seq) {                                     // 0: captured, the event is a graph node
		e->polled = false;
		e->pending = seq;
	}
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	guard g(mu);
	cudaError_t err = sync_allowed("cudaEventQuery");
	if (err != cudaSuccess)
		return ret(err);
	if (e->pending > done_seq) {
		if (!e->polled) {                      // the work is "still running" once
			e->polled = true;
			return cudaErrorNotReady;
		}
		run_until(e->pending);
	}
	return sticky;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	guard g(mu);
	cudaError_t err = sync_allowed("cudaEventSynchronize");
	if (err != cudaSuccess)
		return ret(err);
	if (e->pending > done_seq)
		run_until(e->pending);
	return sticky;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	guard g(mu);
	if ((a->flags | b->flags) & cudaEventDisableTiming || !a->pending || !b->pending)
		return ret(cudaErrorInvalidResourceHandle);
	if (a->pending > done_seq || b->pending > done_seq)
		return ret(cudaErrorNotReady);
	*ms = (float)(b->t_ms - a->t_ms);
	return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
	guard g(mu);
	(void)mode;
	if (!st || capturing)
		return ret(!st ? cudaErrorStreamCaptureUnsupported : cudaErrorStreamCaptureInvalidated);
	st->capture = new cudasim_graph;
	st->capture_failed = false;
	capturing = st;
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
	guard g(mu);
	*graph = NULL;
	if (!st || capturing != st)
		return ret(cudaErrorInvalidValue);
	capturing = NULL;
	cudasim_graph *gr = st->capture;
	st->capture = NULL;
	if (st->capture_failed) {
		delete gr;
		return ret(cudaErrorStreamCaptureInvalidated);
	}
	*graph = gr;
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	(void)flags;
	if (!graph)
		return ret(cudaErrorInvalidValue);
	*exec = new cudasim_graph(*graph);
	return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
	guard g(mu);
	cudaError_t e = check_enqueue(st);
	if (e != cudaSuccess)
		return ret(e);
	if (!exec)
		return ret(cudaErrorInvalidResourceHandle);
	for (size_t i = 0; i < exec->ops.size(); i++)
		enqueue(st, exec->ops[i], exec->nodes[i].type);
	return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
	if (!graph || !numNodes)
		return ret(cudaErrorInvalidValue);
	if (!nodes) {
		*numNodes = graph->nodes.size();
		return cudaSuccess;
	}
	size_t n = *numNodes < graph->nodes.size() ? *numNodes : graph->nodes.size();
	for (size_t i = 0; i < n; i++)
		nodes[i] = &graph->nodes[i];
	*numNodes = n;
	return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType)
{
	if (!node || !pType)
		return ret(cudaErrorInvalidValue);
	*pType = node->type;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	guard g(mu);
	run_all();                                     // a launched graph may still be queued
	delete exec;
	return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	guard g(mu);
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > (227 << 10))
		return ret(cudaErrorInvalidValue);
	max_dyn_smem[func] = value;
	return cudaSuccess;
}

// For the emulator's own tests (tests/cudasim/test_cudasim.c): forget a sticky error and any
// queued work, as a new process would start (CUDA itself has no such call).
void cudasim_reset(void)
{
	guard g(mu);
	queue.clear();
	done_seq = next_seq - 1;
	sticky = last_err = cudaSuccess;
	if (capturing) {
		delete capturing->capture;
		capturing->capture = NULL;
		capturing = NULL;
	}
}

// ------------------------------------------------------------------ cuBLAS ------------

struct cudasim_blas { cudaStream_t st; void *ws; size_t ws_bytes; };

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = new cudasim_blas{ NULL, NULL, 0 };
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t st)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->st = st;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
	guard g(mu);
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (bytes && !is_dev(ws, bytes))
		return CUBLAS_STATUS_INVALID_VALUE;
	h->ws = ws;
	h->ws_bytes = bytes;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
	(void)mode;
	return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

static size_t dt_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static float dt_load(const void *p, cudaDataType t, size_t i)
{
	if (t == CUDA_R_32F)
		return ((const float *)p)[i];
	uint16_t h = ((const uint16_t *)p)[i];
	return t == CUDA_R_16BF ? __bfloat162float(__nv_bfloat16{ h }) : __half2float(__half{ h });
}

static void dt_store(void *p, cudaDataType t, size_t i, float v)
{
	if (t == CUDA_R_32F)
		((float *)p)[i] = v;
	else if (t == CUDA_R_16BF)
		((uint16_t *)p)[i] = __float2bfloat16(v).x;
	else
		((uint16_t *)p)[i] = __float2half(v).x;
}

// op(X) as a row-major [rows, k] fp32 copy: row r of op(X) for X column-major with ld.
static void unpack(std::vector<float> &out, const void *X, cudaDataType t, int ld, bool trans,
		   int rows, int k)
{
	out.resize((size_t)rows * k);
	for (int r = 0; r < rows; r++)
		for (int l = 0; l < k; l++)    // N: X[r + l ld] (rows x k); T: X[l + r ld] (k x rows)
			out[(size_t)r * k + l] = dt_load(X, t, trans ? (size_t)l + (size_t)r * ld
								     : (size_t)r + (size_t)l * ld);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
			    int k, const void *alpha, const void *A, cudaDataType At, int lda, const void *B,
			    cudaDataType Bt, int ldb, const void *beta, void *C, cudaDataType Ct, int ldc,
			    cublasComputeType_t ct, cublasGemmAlgo_t algo)
{
	guard g(mu);
	(void)algo;
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
	if (m < 0 || n < 0 || k < 0 || ta > CUBLAS_OP_C || tb > CUBLAS_OP_C ||
	    lda < (tA ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) || ldb < (tB ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) ||
	    ldc < (m > 1 ? m : 1)) {
		report("cublasGemmEx: invalid m/n/k or leading dimension (m %d n %d k %d lda %d ldb %d ldc %d)",
		       m, n, k, lda, ldb, ldc);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	bool half_in = (At == CUDA_R_16BF || At == CUDA_R_16F) && Bt == At && (Ct == At || Ct == CUDA_R_32F);
	bool f32 = At == CUDA_R_32F && Bt == CUDA_R_32F && Ct == CUDA_R_32F;
	if ((ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_32F_FAST_TF32) || !(half_in || f32)) {
		report("cublasGemmEx: type combination A %d B %d C %d compute %d not supported", At, Bt, Ct, ct);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!m || !n)
		return CUBLAS_STATUS_SUCCESS;
	size_t a_span = tA ? (size_t)(m - 1) * lda + k : (size_t)(k ? k - 1 : 0) * lda + m;
	size_t b_span = tB ? (size_t)(k ? k - 1 : 0) * ldb + n : (size_t)(n - 1) * ldb + k;
	size_t c_span = (size_t)(n - 1) * ldc + m;
	if ((k && (!is_dev(A, a_span * dt_size(At)) || !is_dev(B, b_span * dt_size(Bt)))) ||
	    !is_dev(C, c_span * dt_size(Ct))) {
		report("cublasGemmEx: an operand is not (wholly) in device memory (A %p B %p C %p)", A, B, C);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (h->st && h->st->capture && !h->ws_bytes) {
		report("cublasGemmEx captured without cublasSetWorkspace (cuBLAS would allocate during capture)");
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (check_enqueue(h->st) != cudaSuccess)
		return CUBLAS_STATUS_EXECUTION_FAILED;
	float al = *(const float *)alpha, be = *(const float *)beta;   // host pointer mode: read now
	enqueue(h->st, [=]() {
		std::vector<float> a, b;
		unpack(a, A, At, lda, tA, m, k);       // op(A): [m, k]
		unpack(b, B, Bt, ldb, !tB, n, k);      // op(B)^T: [n, k]
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				const float *x = &a[(size_t)i * k], *y = &b[(size_t)j * k];
				float s[8] = { 0 };
				int l = 0;
				for (; l + 8 <= k; l += 8)
					for (int u = 0; u < 8; u++)
						s[u] += x[l + u] * y[l + u];
				float acc = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
				for (; l < k; l++)
					acc += x[l] * y[l];
				size_t ci = (size_t)i + (size_t)j * ldc;
				float v = al * acc;
				if (be != 0.0f)
					v += be * dt_load(C, Ct, ci);
				dt_store(C, Ct, ci, v);
			}
	});
	return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

extern "C" void cudasim_wmma_fault(const char *what)
{
	fail_block("%s: pointer not 256-bit aligned or ldm not a multiple of 16 bytes", what);
}

extern "C" float *cudasim_warp_scratch(void)
{
	static float buf[MAX_THREADS / 32][256];
	return buf[fibers[cur_fib].tid >> 5];
}
