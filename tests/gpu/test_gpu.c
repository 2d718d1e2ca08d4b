/* test_gpu.c — the CUDA backend against the CPU, on a GPU (`make test-gpu`; `make test` runs it
 * too). It loads librlcuda_dev.so (the backend with its kernel test entry points) from beside
 * build/librlcuda.so, or RINGLM_CUDA_LIB's. Every test prints "SKIP ...: skipped: no CUDA
 * device" when the library is missing (a CUDA=0 build) or no device is usable.
 *
 * Each storage dtype runs its own copy of a test (name_bf16, name_fp16: the global `dt`).
 * Kernels (random inputs, outputs poisoned before the run, tolerance by dtype: bf16 keeps 8
 * mantissa bits, ~2e-3 relative rounding per value, fp16 11 bits, ~2.4e-4): embedding,
 * add+RMSNorm, RoPE+KV write, SwiGLU, paged attention (ragged chunks, block boundaries, GQA,
 * long contexts through the split-KV path); sampling (fp32 logits: once). Whole model: logits
 * against the cpu backend for stories260K and a mid-size synthetic GQA model; greedy tokens
 * of stories260K equal the cpu's; graph replay equals eager execution bit for bit; a mixed
 * batch equals its sequences run alone. FlashInfer's decode (when built in) against the
 * reference and the in-house kernel, and a model whose decode steps run through it.
 * The deterministic mode (rl_batch.deterministic, issue 51), by memcmp: the batch-invariant
 * GEMM's rows whatever the row count (and near its CPU reference), the deterministic
 * attention's rows whatever the batch, chunking or split, and a sequence's logits and sampled
 * tokens through the whole backend alone, beside others, chunked, eager and as drafts.
 * Tests: the CUDA kernels (kernels/cuda_*.cu), runtime/cuda (on a GPU, or on cudasim via test_gpu_cudasim).
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "kernels/cpu_ops.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/cuda/rl_cuda_api.h"
#include "runtime/loop/rl_rt_backend.h"   /* rl_cuda_dev_path */
#include "runtime/model/rl_model_io.h"
#include "kernels/rl_sample.h"
#include "tests/rl_test.h"

static void *lib;
static const struct rl_cuda_testapi *api;
static rl_cuda_create_fn cuda_create;
static int (*cuda_logits)(struct rl_backend *, uint32_t, float *);
static int (*cuda_set_graphs)(struct rl_backend *, int);
static int (*cuda_stats)(struct rl_backend *, struct rl_cuda_stats *);
static const char *(*cuda_last_error)(struct rl_backend *);
static const char *(*fi_version)(void);
static const char *no_gpu = "skipped: no CUDA device";
static int gpu_required;               /* RL_GPU_REQUIRED=1: a skip is a failure */
static int emulated;                   /* the backend is cudasim's (a CPU emulator, ~1000x slower) */

static void open_lib(void)
{
	char path[4096];
	gpu_required = getenv("RL_GPU_REQUIRED") && !strcmp(getenv("RL_GPU_REQUIRED"), "1");
	/* RINGLM_CUDA_LIB: another build of the backend, e.g. build/cudasim's (the CPU emulator) */
	const char *env = getenv("RINGLM_CUDA_LIB");
	ssize_t n = env ? -1 : readlink("/proc/self/exe", path, sizeof path - 64);
	if (env) {
		snprintf(path, sizeof path, "%s", env);
	} else if (n > 0) {
		path[n] = 0;
		char *slash = strrchr(path, '/');
		strcpy(slash ? slash + 1 : path, "../librlcuda.so");
	} else {
		snprintf(path, sizeof path, "librlcuda.so");
	}
	/* the backend's build with the kernel test entry points, beside it */
	char dev[4096];
	if (rl_cuda_dev_path(path, dev, sizeof dev) == 0)
		memcpy(path, dev, sizeof path);
	fprintf(stderr, "test_gpu: backend library %s\n", path);
	emulated = strstr(path, "cudasim") != NULL;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		/* dlerror tells a missing file (a CUDA=0 build, no nvcc) from an undefined symbol or a
		 * missing libcudart */
		fprintf(stderr, "test_gpu: cannot load it: %s\n", dlerror());
		return;
	}
	int (*check)(char *, size_t) = (int (*)(char *, size_t))dlsym(lib, "rl_cuda_device_check");
	const struct rl_cuda_testapi *(*get)(void) = (const struct rl_cuda_testapi *(*)(void))dlsym(lib, "rl_cuda_testapi");
	cuda_create = (rl_cuda_create_fn)dlsym(lib, "rl_backend_cuda_create");
	cuda_logits = (int (*)(struct rl_backend *, uint32_t, float *))dlsym(lib, "rl_backend_cuda_logits");
	cuda_set_graphs = (int (*)(struct rl_backend *, int))dlsym(lib, "rl_backend_cuda_set_graphs");
	cuda_stats = (int (*)(struct rl_backend *, struct rl_cuda_stats *))dlsym(lib, "rl_backend_cuda_stats");
	cuda_last_error = (const char *(*)(struct rl_backend *))dlsym(lib, "rl_backend_cuda_last_error");
	fi_version = (const char *(*)(void))dlsym(lib, "rl_cuda_flashinfer_version");
	char why[256];
	if (!check || !get || !cuda_create || !cuda_logits || !cuda_set_graphs || !cuda_stats || !cuda_last_error) {
		fprintf(stderr, "test_gpu: %s lacks its entry points (a stale build?)\n", path);
	} else if (check(why, sizeof why)) {
		fprintf(stderr, "test_gpu: %s\n", why);
	} else {
		api = get();
		fprintf(stderr, "test_gpu: FlashInfer %s\n", fi_version ? fi_version() : "not built in");
	}
}

/* No usable device or library: skip, or fail under RL_GPU_REQUIRED=1. */
#define NEED_GPU() do { if (!api) { if (gpu_required) { rl_t_failed_now++; \
	fprintf(stderr, "  no usable CUDA device or librlcuda.so (above), and RL_GPU_REQUIRED=1\n"); return; } \
	SKIP("%s", no_gpu); } } while (0)
/* A library without FlashInfer: skip, or fail under RL_GPU_REQUIRED=1. */
#define FI_SKIP_WHY "this librlcuda.so has no FlashInfer kernels (cudasim never has; a GPU build gets them from .ci/flashinfer's headers)"
#define NEED_FI() do { NEED_GPU(); if (!api->fi_attention || !fi_version) { if (gpu_required) { \
	rl_t_failed_now++; fprintf(stderr, "  %s, and RL_GPU_REQUIRED=1\n", FI_SKIP_WHY); return; } \
	SKIP(FI_SKIP_WHY); } } while (0)
/* A kernel entry point's call, REQUIREd to succeed, with the failing CUDA call named. */
#define REQUIRE_API(call) do { int rc_ = (call); if (rc_) { rl_t_failed_now++; \
	fprintf(stderr, "  %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, strerror(-rc_), api->last_error()); \
	return; } } while (0)

/* ---------------------------------------------------------------- helpers --------- */

#define RS_SEED 88172645463325252ull
static uint64_t rs = RS_SEED;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static float frand(void) { return (float)(rnd() >> 40) / 16777216.0f * 2.0f - 1.0f; }  /* [-1, 1) */

/* The storage dtype under test, and conversions to and from it (round to nearest even, as the
 * kernels' stores). */
static enum rl_cuda_dtype dt;
static uint16_t enc(float f) { return dt == RL_CUDA_FP16 ? rl_f32_to_f16(f) : rl_f32_to_bf16(f); }
static float dec(uint16_t h) { return dt == RL_CUDA_FP16 ? rl_f16_to_f32(h) : rl_bf16_to_f32(h); }
/* A tolerance for bf16 storage, tightened for fp16 (3 more mantissa bits: 8x finer rounding;
 * 4x keeps a margin for the fp32 arithmetic both share). */
static double tol(double bf16_tol) { return dt == RL_CUDA_FP16 ? bf16_tol / 4 : bf16_tol; }
static const char *dt_name(void) { return dt == RL_CUDA_FP16 ? "fp16" : "bf16"; }

/* name_bf16 and name_fp16: test name() once per storage dtype, each from the same random state
 * (the same inputs for both, whatever ran before). */
#define BOTH_DTYPES(name) \
	static void name##_bf16(void) { dt = RL_CUDA_BF16; rs = RS_SEED; name(); } \
	static void name##_fp16(void) { dt = RL_CUDA_FP16; rs = RS_SEED; name(); }

/* ||a - b|| / ||b|| over n values; NaN anywhere fails (returns inf). */
static double rel_l2(const float *a, const float *b, size_t n)
{
	double e = 0, r = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isinf(a[i]))
			return INFINITY;
		e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		r += (double)b[i] * b[i];
	}
	return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* A step under test: sequences with their own blocks, rows packed as rl_batch wants. */
#define TSEQS 1024                     /* FlashInfer's non-split case needs hundreds of rows */
struct tstep {
	struct rl_batch b;
	struct rl_batch_seq seqs[TSEQS];
	uint32_t tokens[8192], pos[8192], row_seq[8192];
	uint32_t bt[TSEQS][1024];
};

/* Adds sequence i = n_seqs with q_len rows ending at ctx_len, on blocks 64 i, 64 i + 1, ...
 * (or random ones when shuffle). */
static void add_seq(struct tstep *t, uint32_t q_len, uint32_t ctx_len, uint32_t bs, uint32_t n_blocks,
		    int shuffle, uint32_t vocab, int sample)
{
	uint32_t i = t->b.n_seqs++, row = t->b.n_tokens;
	struct rl_batch_seq *s = &t->seqs[i];
	s->q_start = row; s->q_len = q_len; s->ctx_len = ctx_len;
	s->n_blocks = (ctx_len + bs - 1) / bs;
	for (uint32_t k = 0; k < s->n_blocks; k++)
		t->bt[i][k] = shuffle ? (uint32_t)(rnd() % n_blocks) : (i * 64 + k) % n_blocks;
	s->block_table = t->bt[i];
	s->sample = sample; s->seq_id = i;
	for (uint32_t r = 0; r < q_len; r++) {
		t->tokens[row + r] = (uint32_t)(rnd() % vocab);
		t->pos[row + r] = ctx_len - q_len + r;
		t->row_seq[row + r] = i;
	}
	t->b.n_tokens += q_len;
	if (q_len > 1)                 /* prefill chunks come first (rl_batch.h); callers add them first */
		t->b.n_prefill = i + 1;
	t->b.tokens = t->tokens; t->b.pos = t->pos; t->b.row_seq = t->row_seq; t->b.seqs = t->seqs;
}

static void tstep_init(struct tstep *t, uint32_t bs)
{
	memset(&t->b, 0, sizeof t->b);
	t->b.block_size = bs;
}

/* ---------------------------------------------------------------- kernels --------- */

static void test_embed(void)
{
	NEED_GPU();
	static struct tstep t;
	uint32_t vocab = 300, dim = 96, rows = 24;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 64, 8, 64, 16, 512, 4, 4, vocab, 264);
	tstep_init(&t, 16);
	add_seq(&t, 13, 20, 16, 64, 1, vocab, 1);
	add_seq(&t, 1, 40, 16, 64, 1, vocab, 1);
	uint16_t *emb = malloc((size_t)vocab * dim * 2);
	float *x = malloc((size_t)rows * dim * 4);
	for (size_t i = 0; i < (size_t)vocab * dim; i++)
		emb[i] = enc(frand());
	for (size_t i = 0; i < (size_t)rows * dim; i++)
		x[i] = NAN;
	REQUIRE_API(api->embed(x, emb, vocab, &g, &t.b, rows, dim, dt));
	for (uint32_t r = 0; r < rows; r++) {
		uint32_t tok = r < t.b.n_tokens ? t.tokens[r] : 0;     /* padding gathers token 0 */
		for (uint32_t d = 0; d < dim; d++)
			CHECK(x[(size_t)r * dim + d] == dec(emb[(size_t)tok * dim + d]));
	}
	free(emb); free(x);
}

static void add_rmsnorm_at(uint32_t dim)
{
	uint32_t rows = 37;
	float *x = malloc((size_t)rows * dim * 4), *x0 = malloc((size_t)rows * dim * 4);
	float *dl = malloc((size_t)rows * dim * 4), *w = malloc(dim * 4), *ref = malloc(dim * 4), *got = malloc(dim * 4);
	uint16_t *out = malloc((size_t)rows * dim * 2);
	int32_t map[37];
	for (size_t i = 0; i < (size_t)rows * dim; i++) {
		x0[i] = x[i] = 3 * frand();
		dl[i] = frand();
	}
	for (uint32_t d = 0; d < dim; d++)
		w[d] = 1 + 0.1f * frand();
	for (int pass = 0; pass < 2; pass++) {
		memcpy(x, x0, (size_t)rows * dim * 4);
		for (size_t i = 0; i < (size_t)rows * dim; i++)
			out[i] = 0xffff;                        /* NaN */
		for (uint32_t i = 0; i < rows; i++)
			map[i] = i % 5 == 4 ? -1 : (int32_t)((i * 7) % rows);
		REQUIRE_API(api->add_rmsnorm(out, x, dl, w, pass ? map : NULL, rows, rows, dim, 1e-5f, !pass, dt));
		for (uint32_t i = 0; i < rows; i++) {
			int r = pass ? map[i] : (int)i;
			if (r < 0) {
				for (uint32_t d = 0; d < dim; d++)
					CHECK(out[(size_t)i * dim + d] == 0);
				continue;
			}
			float v[4160];
			for (uint32_t d = 0; d < dim; d++)
				v[d] = x0[(size_t)r * dim + d] + dl[(size_t)r * dim + d];
			rl_cpu_rmsnorm(ref, v, w, dim, 1e-5f);
			for (uint32_t d = 0; d < dim; d++)
				got[d] = dec(out[(size_t)i * dim + d]);
			CHECKF(rel_l2(got, ref, dim) < tol(4e-3), "%s dim %u row %u: %g", dt_name(), dim, i,
			       rel_l2(got, ref, dim));
			if (!pass)
				CHECK(!memcmp(x + (size_t)r * dim, v, dim * 4));   /* x += delta, exactly */
		}
		if (pass)
			CHECK(!memcmp(x, x0, (size_t)rows * dim * 4));             /* write_x 0: untouched */
	}
	free(x); free(x0); free(dl); free(w); free(ref); free(got); free(out);
}

/* dim 4160: the float4 kernel with a second float4 on some threads; 4098: the strided one
 * (dim % 4 != 0); 64: the float4 kernel with idle lanes in its one warp. */
static void test_add_rmsnorm(void)
{
	NEED_GPU();
	add_rmsnorm_at(4096 + 64);
	add_rmsnorm_at(4098);
	add_rmsnorm_at(64);
}

static void test_rope_kv(void)
{
	NEED_GPU();
	static struct tstep t;
	uint32_t nh = 8, nkv = 2, hd = 64, bs = 16, nblk = 256, width = (nh + 2 * nkv) * hd;  /* seq i on blocks 64 i.. */
	struct rl_cuda_geom g;
	for (int halves = 0; halves < 2; halves++) {
		rl_cuda_host_geom(&g, 128, 8, nblk, bs, 1024, nh, nkv, 1000, 264);
		tstep_init(&t, bs);
		add_seq(&t, 37, 50, bs, nblk, 0, 1000, 0);     /* chunk straddling blocks */
		add_seq(&t, 1, 17, bs, nblk, 0, 1000, 1);      /* decode at slot 0 of a new block */
		add_seq(&t, 1, 16, bs, nblk, 0, 1000, 1);      /* decode in the last slot */
		uint32_t rows = 48;
		size_t ce = (size_t)nblk * nkv * bs * hd;
		uint16_t *qkv = malloc((size_t)rows * width * 2), *q = malloc((size_t)rows * nh * hd * 2);
		uint16_t *kc = malloc(ce * 2), *vc = malloc(ce * 2);
		float *bias = malloc(width * 4), inv[32], row[768];
		for (size_t i = 0; i < (size_t)rows * width; i++)
			qkv[i] = enc(frand());
		for (uint32_t i = 0; i < width; i++)
			bias[i] = 0.1f * frand();
		for (uint32_t i = 0; i < hd / 2; i++)
			inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)hd);
		for (size_t i = 0; i < ce; i++)
			kc[i] = vc[i] = 0xffff;
		for (size_t i = 0; i < (size_t)rows * nh * hd; i++)
			q[i] = 0xffff;
		REQUIRE_API(api->rope_kv(q, kc, vc, ce, qkv, bias, inv, &g, &t.b, rows, nh, hd, 2.0f, halves, dt));
		size_t written = 0;
		for (uint32_t r = 0; r < t.b.n_tokens; r++) {
			for (uint32_t i = 0; i < width; i++)
				row[i] = dec(qkv[(size_t)r * width + i]) + bias[i];
			float cs[128];
			rl_cpu_rope_angles(cs, hd, (float)t.pos[r] / 2.0f, inv, 1.0f);
			rl_cpu_rope(row, nh + nkv, hd, hd, cs, halves);
			float got[768];
			for (uint32_t i = 0; i < nh * hd; i++)
				got[i] = dec(q[(size_t)r * nh * hd + i]);
			CHECKF(rel_l2(got, row, nh * hd) < tol(5e-3), "%s q row %u: %g", dt_name(), r, rel_l2(got, row, nh * hd));
			const struct rl_batch_seq *s = &t.seqs[t.row_seq[r]];
			uint32_t p = t.pos[r];
			size_t base = (size_t)s->block_table[p / bs] * nkv * bs * hd + (p % bs) * hd;
			for (uint32_t h = 0; h < nkv; h++)
				for (uint32_t d = 0; d < hd; d++) {
					float kr = row[(nh + h) * hd + d], vr = row[(nh + nkv + h) * hd + d];
					float kg = dec(kc[base + (size_t)h * bs * hd + d]), vg = dec(vc[base + (size_t)h * bs * hd + d]);
					CHECK(fabsf(kg - kr) <= tol(1e-2) * (fabsf(kr) + 1));
					CHECK(vg == dec(enc(vr)));
					written++;
				}
		}
		size_t poisoned = 0;                            /* nothing else in the cache changed */
		for (size_t i = 0; i < ce; i++)
			poisoned += kc[i] == 0xffff;
		CHECK(poisoned == ce - written);
		free(qkv); free(q); free(kc); free(vc); free(bias);
	}
}

static void test_swiglu(void)
{
	NEED_GPU();
	uint32_t rows = 9, hid = 1000;
	uint16_t *gu = malloc((size_t)rows * 2 * hid * 2), *h = malloc((size_t)rows * hid * 2);
	float g[1000], u[1000], got[1000];
	for (size_t i = 0; i < (size_t)rows * 2 * hid; i++)
		gu[i] = enc(4 * frand());
	for (size_t i = 0; i < (size_t)rows * hid; i++)
		h[i] = 0xffff;
	REQUIRE_API(api->swiglu(h, gu, rows, hid, dt));
	for (uint32_t r = 0; r < rows; r++) {
		for (uint32_t i = 0; i < hid; i++) {
			g[i] = dec(gu[(size_t)r * 2 * hid + i]);
			u[i] = dec(gu[(size_t)r * 2 * hid + hid + i]);
			got[i] = dec(h[(size_t)r * hid + i]);
		}
		rl_cpu_silu_mul(g, u, hid);
		CHECKF(rel_l2(got, g, hid) < tol(4e-3), "%s row %u: %g", dt_name(), r, rel_l2(got, g, hid));
	}
	free(gu); free(h);
}

/* The CPU reference of every row of t's sequences: ref, qf [rows, nh hd]; kf, vf the cache
 * [n_blocks, nkv, bs, hd] (fp32 copies of the dt values the GPU reads). */
static void attention_ref(const struct tstep *t, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs,
			  const float *kf, const float *vf, const float *qf, float *ref, float *scratch)
{
	uint32_t qd = nh * hd;
	for (uint32_t i = 0; i < t->b.n_seqs; i++) {
		const struct rl_batch_seq *s = &t->seqs[i];
		for (uint32_t h = 0; h < nh; h++) {
			uint32_t kh = h / (nh / nkv);
			struct rl_cpu_kv_view kv = { .k = kf + (size_t)kh * bs * hd, .v = vf + (size_t)kh * bs * hd,
						     .block_table = s->block_table, .block_size = bs,
						     .block_stride = (size_t)nkv * bs * hd };
			rl_cpu_attention(ref + (size_t)s->q_start * qd + h * hd, qd, qf + (size_t)s->q_start * qd + h * hd,
					 qd, s->q_len, 1, s->ctx_len - s->q_len, hd, &kv, scratch);
		}
	}
}

/* One attention case: the CPU reference over the same dt values in fp32. */
static void attention_case(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, uint32_t nblk,
			   const uint32_t *qlens, const uint32_t *ctxs, uint32_t n_seqs, uint32_t n_prefill,
			   int want_split)
{
	static struct tstep t;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 2048, 64, nblk, bs, 8192, nh, nkv, 1000, 264);
	tstep_init(&t, bs);
	for (uint32_t i = 0; i < n_seqs; i++)
		add_seq(&t, qlens[i], ctxs[i], bs, nblk, 1, 1000, 1);
	t.b.n_prefill = n_prefill;
	uint32_t rows = rl_cuda_host_eager_rows(t.b.n_tokens), qd = nh * hd;
	size_t ce = (size_t)nblk * nkv * bs * hd;
	uint16_t *kc = malloc(ce * 2), *vc = malloc(ce * 2), *q = malloc((size_t)rows * qd * 2), *out = malloc((size_t)rows * qd * 2);
	float *kf = malloc(ce * 4), *vf = malloc(ce * 4), *qf = malloc((size_t)rows * qd * 4), *ref = malloc((size_t)rows * qd * 4);
	float *got = malloc((size_t)rows * qd * 4);
	float *scratch = malloc(rl_cpu_attention_scratch(rows, hd, bs) * sizeof(float));
	for (size_t i = 0; i < ce; i++) {
		kc[i] = enc(frand()); vc[i] = enc(frand());
		kf[i] = dec(kc[i]); vf[i] = dec(vc[i]);
	}
	for (size_t i = 0; i < (size_t)rows * qd; i++) {
		q[i] = enc(2 * frand());
		qf[i] = dec(q[i]);
		out[i] = 0xffff;
	}
	uint32_t n_parts = 0;
	REQUIRE_API(api->attention(out, q, kc, vc, ce, &g, &t.b, rows, nh, hd, &n_parts, dt));
	CHECKF(!want_split || n_parts > 0, "expected the split-KV path");
	attention_ref(&t, nh, nkv, hd, bs, kf, vf, qf, ref, scratch);
	for (uint32_t r = 0; r < t.b.n_tokens; r++) {
		for (uint32_t i = 0; i < qd; i++)
			got[i] = dec(out[(size_t)r * qd + i]);
		double e = rel_l2(got, ref + (size_t)r * qd, qd);
		CHECKF(e < tol(1e-2), "%s row %u (pos %u): rel err %g", dt_name(), r, t.pos[r], e);
		if (e >= tol(1e-2))
			break;
	}
	free(kc); free(vc); free(q); free(out); free(kf); free(vf); free(qf); free(ref); free(got);
	free(scratch);
}

static void test_attention_mixed(void)
{
	NEED_GPU();
	/* ragged prefill chunks over cached prefixes (some starting mid-block), then decode rows */
	uint32_t ql[] = { 1, 17, 70, 33, 5, 1, 1, 1, 1 }, ctx[] = { 1, 17, 100, 48, 300, 2, 16, 17, 129 };
	attention_case(8, 2, 64, 16, 512, ql, ctx, 9, 5, 0);        /* GQA group 4 */
	attention_case(8, 8, 64, 16, 512, ql, ctx, 9, 5, 0);        /* MHA */
	attention_case(32, 8, 128, 16, 512, ql, ctx, 9, 5, 0);      /* llama3-8b heads */
	attention_case(4, 2, 256, 16, 512, ql, ctx, 9, 5, 0);       /* head_dim 256: > 48 KiB of shared memory */
	uint32_t ql2[] = { 40, 1, 1 }, ctx2[] = { 40, 7, 31 };
	attention_case(8, 4, 8, 4, 64, ql2, ctx2, 3, 1, 0);         /* stories260K: hd 8, tiny blocks */
	attention_case(8, 1, 64, 32, 128, ql2, ctx2, 3, 1, 0);      /* group 8, block 32 */
}

static void test_attention_long(void)
{
	NEED_GPU();
	/* a lone long decode row takes the split-KV path; a long prefill chunk does not */
	uint32_t ql[] = { 1 }, ctx[] = { 6000 };
	attention_case(32, 8, 128, 16, 1024, ql, ctx, 1, 0, 1);
	uint32_t ql2[] = { 1, 1 }, ctx2[] = { 4097, 513 };
	attention_case(8, 2, 64, 16, 1024, ql2, ctx2, 2, 0, 1);
	/* the emulator's cost follows chunk x context: a 96-row chunk there (a GPU runs 512) */
	uint32_t ql3[] = { emulated ? 96 : 512, 1 }, ctx3[] = { 3000, 2000 };
	attention_case(8, 2, 64, 16, 1024, ql3, ctx3, 2, 1, 0);
}

/* ---------------------------------------------------------------- deterministic --- */

/* The CPU reference of rl_cuda_gemm_det (rl_cpu_matmul's operation): y[rows, out] =
 * x[rows, in] w[out, in]^T over the same dt values, summed in double. */
static void gemm_det_ref(float *y, const float *x, const float *w, uint32_t rows, uint32_t in, uint32_t out)
{
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t o = 0; o < out; o++) {
			double s = 0;
			for (uint32_t k = 0; k < in; k++)
				s += (double)x[(size_t)r * in + k] * w[(size_t)o * in + k];
			y[(size_t)r * out + o] = (float)s;
		}
}

/* The deterministic GEMM on the last n of 64 rows of X, n = 64, 1, 3, 17: a row moves from
 * tile position 63 to 0, 2 and 16 and across the kernel's two tile shapes (<= 16 rows, more),
 * and its outputs (fp32 and dt alike) must keep their bits; the 64-row result is within
 * tolerance of the reference. */
static void gemm_det_case(uint32_t in, uint32_t out)
{
	enum { R = 64 };
	static const uint32_t ns[] = { 64, 1, 3, 17 };
	uint16_t *x = malloc((size_t)R * in * 2), *w = malloc((size_t)out * in * 2);
	uint16_t *all16 = malloc((size_t)R * out * 2), *y16 = malloc((size_t)R * out * 2);
	float *xf = malloc((size_t)R * in * 4), *wf = malloc((size_t)out * in * 4), *ref = malloc((size_t)R * out * 4);
	float *all = malloc((size_t)R * out * 4), *y = malloc((size_t)R * out * 4), *got = malloc((size_t)out * 4);
	for (size_t i = 0; i < (size_t)R * in; i++)
		xf[i] = dec(x[i] = enc(frand()));
	for (size_t i = 0; i < (size_t)out * in; i++)
		wf[i] = dec(w[i] = enc(frand()));
	for (int c = 0; c < 4; c++) {
		const uint32_t n = ns[c], first = R - n;
		memset(y, 0xff, (size_t)R * out * 4);    /* poison: NaN */
		memset(y16, 0xff, (size_t)R * out * 2);
		REQUIRE_API(api->gemm_det(y, 1, x + (size_t)first * in, w, n, in, out, dt));
		REQUIRE_API(api->gemm_det(y16, 0, x + (size_t)first * in, w, n, in, out, dt));
		if (n == R) {
			memcpy(all, y, (size_t)R * out * 4);
			memcpy(all16, y16, (size_t)R * out * 2);
			continue;
		}
		CHECKF(!memcmp(y, all + (size_t)first * out, (size_t)n * out * 4),
		       "%s %ux%u: fp32 rows %u.. differ computed among %u rows and among 64", dt_name(), in, out, first, n);
		CHECKF(!memcmp(y16, all16 + (size_t)first * out, (size_t)n * out * 2),
		       "%s %ux%u: %s rows %u.. differ computed among %u rows and among 64", dt_name(), in, out, dt_name(),
		       first, n);
	}
	gemm_det_ref(ref, xf, wf, R, in, out);
	for (uint32_t r = 0; r < R; r++) {
		double e = rel_l2(all + (size_t)r * out, ref + (size_t)r * out, out);
		CHECKF(e < 1e-5, "%s %ux%u row %u: fp32 output rel err %g", dt_name(), in, out, r, e);
		for (uint32_t o = 0; o < out; o++)
			got[o] = dec(all16[(size_t)r * out + o]);
		e = rel_l2(got, ref + (size_t)r * out, out);
		CHECKF(e < tol(4e-3), "%s %ux%u row %u: %s output rel err %g", dt_name(), in, out, r, dt_name(), e);
	}
	free(x); free(w); free(all16); free(y16); free(xf); free(wf); free(ref); free(all); free(y); free(got);
}

static void test_gemm_det(void)
{
	NEED_GPU();
	gemm_det_case(200, 150);     /* K % 8 == 0: 16-byte loads; a half K slice and a part output tile */
	gemm_det_case(77, 70);       /* odd K: element loads, a ragged last slice */
	gemm_det_case(512, 64);
}

/* The deterministic attention (the step packed with deterministic = 1, as the backend runs
 * it): the row at position P of one sequence, with the same query, cache and block table,
 * keeps its bits as a lone decode row (split at the fixed chunks: a partial each, merged by
 * the reduce kernel), as a decode row among other sequences' chunks and decode rows, as one
 * of 140 decode rows (which fill the grid: not split, merged in the kernel), and as the last
 * row of prefill chunks of 5, 37 and 200 rows beside others; the lone row is within
 * tolerance of the CPU reference. */
static void attention_det_case(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, uint32_t P)
{
	static struct tstep t;
	const uint32_t nblk = 1024, qd = nh * hd, V = 1000;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 2048, 256, nblk, bs, 8192, nh, nkv, V, 264);
	size_t ce = (size_t)nblk * nkv * bs * hd;
	uint16_t *kc = malloc(ce * 2), *vc = malloc(ce * 2), *qrow = malloc((size_t)qd * 2), *first = malloc((size_t)qd * 2);
	uint16_t *q = malloc((size_t)2048 * qd * 2), *out = malloc((size_t)2048 * qd * 2);
	float *kf = malloc(ce * 4), *vf = malloc(ce * 4), *qf = malloc((size_t)2048 * qd * 4), *ref = malloc((size_t)2048 * qd * 4);
	float *got = malloc((size_t)qd * 4), *scratch = malloc(rl_cpu_attention_scratch(1, hd, bs) * sizeof(float));
	for (size_t i = 0; i < ce; i++) {
		kf[i] = dec(kc[i] = enc(frand()));
		vf[i] = dec(vc[i] = enc(frand()));
	}
	for (uint32_t i = 0; i < qd; i++)
		qrow[i] = enc(2 * frand());
	/* steps: the target's q_len (1: decode), the other sequences' (q_len, ctx) and where the
	 * target goes among the decode rows (its chunk goes first among the chunks) */
	struct { uint32_t q_len, n_other, other[3][2], fill; } sc[] = {
		{ 1, 0, { { 0 } }, 0 },
		{ 1, 3, { { 33, 80 }, { 1, 2 * P }, { 1, 5 } }, 0 },
		{ 1, 0, { { 0 } }, 139 },              /* + 139 short decode rows */
		{ 37, 0, { { 0 } }, 0 },
		{ 5, 2, { { 64, 64 }, { 1, 1000 } }, 0 },
		{ 200, 2, { { 3, 3 }, { 1, 17 } }, 0 },
	};
	for (uint32_t k = 0; k < sizeof sc / sizeof *sc; k++) {
		tstep_init(&t, bs);
		uint32_t target = 0;
		/* chunks first (rl_batch.h): the target's when it has one, then the others' */
		if (sc[k].q_len > 1)
			add_seq(&t, sc[k].q_len, P + 1, bs, nblk, 1, V, 0);
		for (uint32_t j = 0; j < sc[k].n_other; j++)
			if (sc[k].other[j][0] > 1)
				add_seq(&t, sc[k].other[j][0], sc[k].other[j][1], bs, nblk, 1, V, 0);
		if (sc[k].q_len == 1) {
			target = t.b.n_seqs;
			add_seq(&t, 1, P + 1, bs, nblk, 1, V, 0);
		}
		for (uint32_t j = 0; j < sc[k].n_other; j++)
			if (sc[k].other[j][0] == 1)
				add_seq(&t, 1, sc[k].other[j][1], bs, nblk, 1, V, 0);
		for (uint32_t j = 0; j < sc[k].fill; j++)
			add_seq(&t, 1, 3 + j % 5, bs, nblk, 1, V, 0);
		for (uint32_t b = 0; b < t.seqs[target].n_blocks; b++)
			t.bt[target][b] = (7 + 13 * b) % nblk;    /* the target's blocks, the same every step */
		t.b.deterministic = 1;
		const uint32_t rows = rl_cuda_host_eager_rows(t.b.n_tokens);
		const uint32_t row = t.seqs[target].q_start + t.seqs[target].q_len - 1;
		for (size_t i = 0; i < (size_t)rows * qd; i++)
			q[i] = enc(2 * frand());
		memcpy(q + (size_t)row * qd, qrow, (size_t)qd * 2);
		memset(out, 0xff, (size_t)rows * qd * 2);
		uint32_t n_parts = UINT32_MAX;
		REQUIRE_API(api->attention(out, q, kc, vc, ce, &g, &t.b, rows, nh, hd, &n_parts, dt));
		/* alone, the row is split at every chunk; among 140 rows it is not */
		if (k == 0 || k == 2)
			CHECKF(n_parts == (k ? 0 : (P + RL_CUDA_DET_CHUNK) / RL_CUDA_DET_CHUNK),
			       "%s hd %u step %u: %u partials", dt_name(), hd, k, n_parts);
		if (k == 0) {
			memcpy(first, out + (size_t)row * qd, (size_t)qd * 2);
			for (size_t i = 0; i < (size_t)rows * qd; i++)
				qf[i] = dec(q[i]);
			attention_ref(&t, nh, nkv, hd, bs, kf, vf, qf, ref, scratch);
			for (uint32_t i = 0; i < qd; i++)
				got[i] = dec(first[i]);
			double e = rel_l2(got, ref + (size_t)row * qd, qd);
			CHECKF(e < tol(1e-2), "%s hd %u: the lone row's rel err %g", dt_name(), hd, e);
		} else {
			CHECKF(!memcmp(first, out + (size_t)row * qd, (size_t)qd * 2),
			       "%s hd %u step %u: position %u's output differs from the lone decode row's", dt_name(), hd, k, P);
		}
	}
	free(kc); free(vc); free(qrow); free(first); free(q); free(out); free(kf); free(vf); free(qf); free(ref);
	free(got); free(scratch);
}

/* The same, Q positions at once for sensitivity (a 1-ulp fp32 difference rarely survives the
 * rounding to dt, so many outputs are compared): positions P - Q + 1 .. P as the rows of one
 * prefill chunk (each merged in the kernel) and as Q decode rows of Q sequences on the same
 * blocks in one step, each split at the fixed chunks (a geometry that always wants more CTAs)
 * and merged by the reduce kernel: every output bit alike. */
static void attention_det_rows(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, uint32_t P, uint32_t Q)
{
	static struct tstep t;
	const uint32_t nblk = 1024, qd = nh * hd, V = 1000;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 2048, 256, nblk, bs, 8192, nh, nkv, V, 1u << 20);
	size_t ce = (size_t)nblk * nkv * bs * hd;
	uint16_t *kc = malloc(ce * 2), *vc = malloc(ce * 2), *q = malloc((size_t)Q * qd * 2);
	uint16_t *a = malloc((size_t)Q * qd * 2), *b = malloc((size_t)Q * qd * 2);
	for (size_t i = 0; i < ce; i++) {
		kc[i] = enc(frand());
		vc[i] = enc(frand());
	}
	for (size_t i = 0; i < (size_t)Q * qd; i++)
		q[i] = enc(2 * frand());
	for (int mode = 0; mode < 2; mode++) {     /* 0: one chunk, 1: Q decode rows */
		tstep_init(&t, bs);
		for (uint32_t i = 0; i < (mode ? Q : 1); i++) {
			const uint32_t ctx = mode ? P - Q + 2 + i : P + 1;
			add_seq(&t, mode ? 1 : Q, ctx, bs, nblk, 0, V, 0);
			for (uint32_t k = 0; k < t.seqs[i].n_blocks; k++)
				t.bt[i][k] = (7 + 13 * k) % nblk;
		}
		t.b.deterministic = 1;
		uint16_t *out = mode ? b : a;
		memset(out, 0xff, (size_t)Q * qd * 2);
		uint32_t n_parts = 0;
		REQUIRE_API(api->attention(out, q, kc, vc, ce, &g, &t.b, Q, nh, hd, &n_parts, dt));
		if (mode)
			CHECKF(n_parts >= Q * 2, "%s hd %u: %u partials for %u long decode rows", dt_name(), hd, n_parts, Q);
		else
			CHECKF(n_parts == 0, "%s hd %u: a prefill chunk split (%u partials)", dt_name(), hd, n_parts);
	}
	uint32_t differ = 0;
	for (size_t i = 0; i < (size_t)Q * qd; i++)
		differ += a[i] != b[i];
	CHECKF(!differ, "%s hd %u: %u of %u outputs differ between the chunk's rows and the split decode rows",
	       dt_name(), hd, differ, Q * qd);
	free(kc); free(vc); free(q); free(a); free(b);
}

static void test_attention_det(void)
{
	NEED_GPU();
	/* on the emulator fewer keys and rows (still 3 chunks of 256: splits and merges) */
	attention_det_rows(8, 2, 64, 16, emulated ? 600 : 1100, emulated ? 40 : 128);
	attention_det_rows(8, 4, 8, 4, emulated ? 520 : 600, emulated ? 24 : 64);
	attention_det_case(8, 2, 64, 16, 700);      /* hd % 16 == 0: every item on tensor cores */
	attention_det_case(8, 4, 8, 4, 600);        /* stories260K's hd 8: every item on CUDA cores */
}

/* FlashInfer (--cuda-attn flashinfer) against the CPU reference and the in-house kernel on one
 * step of n_seqs sequences, qlens[i] rows each (NULL: a decode-only step, one row each) over
 * contexts ctxs[i], then pad padding rows; max_seqs sets the geometry's sequence limit (the
 * prefill plan's request count, rl_cuda_host_fi_batch). Run twice: eagerly, and as the backend
 * runs it (captured under the backend's synthetic plan, re-planned from the real page index,
 * which must give the same plan, then replayed); the replay must equal the eager run bit for
 * bit. Padding rows: decode writes them finite; prefill writes nothing outside its requests.
 * want_split: the plan's split flag this case must get (-1: either); *info: what it got. */
static void fi_case(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t bs, uint32_t nblk, const uint32_t *qlens,
		    const uint32_t *ctxs, uint32_t n_seqs, uint32_t pad, uint32_t max_seqs, int want_split,
		    struct rl_cuda_fi_info *info)
{
	static struct tstep t;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 2048, max_seqs, nblk, bs, 8192, nh, nkv, 1000, 264);
	tstep_init(&t, bs);
	for (uint32_t i = 0; i < n_seqs; i++)
		add_seq(&t, qlens ? qlens[i] : 1, ctxs[i], bs, nblk, 1, 1000, 1);
	uint32_t n = t.b.n_tokens, rows = n + pad, qd = nh * hd;
	int prefill = t.b.n_prefill > 0;
	size_t ce = (size_t)nblk * nkv * bs * hd, od = (size_t)rows * qd;
	uint16_t *kc = malloc(ce * 2), *vc = malloc(ce * 2), *q = malloc(od * 2);
	uint16_t *o_fi = malloc(od * 2), *o_gr = malloc(od * 2), *o_rl = malloc(od * 2);
	float *kf = malloc(ce * 4), *vf = malloc(ce * 4), *qf = malloc(od * 4);
	float *ref = malloc(od * 4), *a = malloc(qd * 4), *b = malloc(qd * 4);
	float *scratch = malloc(rl_cpu_attention_scratch(rows, hd, bs) * sizeof(float));
	for (size_t i = 0; i < ce; i++) {
		kc[i] = enc(frand()); vc[i] = enc(frand());
		kf[i] = dec(kc[i]); vf[i] = dec(vc[i]);
	}
	for (size_t i = 0; i < od; i++) {
		q[i] = enc(2 * frand());
		qf[i] = dec(q[i]);
		o_fi[i] = o_gr[i] = o_rl[i] = 0xffff;     /* NaN */
	}
	struct rl_cuda_fi_info ie = { -1, -1, -1, -1 }, ig = { -1, -1, -1, -1 };
	REQUIRE_API(api->attention(o_rl, q, kc, vc, ce, &g, &t.b, rows, nh, hd, NULL, dt));
	REQUIRE_API(api->fi_attention(o_fi, q, kc, vc, ce, &g, &t.b, rows, nh, hd, 0, dt, &ie));
	REQUIRE_API(api->fi_attention(o_gr, q, kc, vc, ce, &g, &t.b, rows, nh, hd, 1, dt, &ig));
	*info = ie;
	printf("  FlashInfer %s %s, %u query / %u KV heads, head dim %u, block %u: %u rows (%u padding) in %u "
	       "sequences: padded batch %lld, %s, query tile %d\n", prefill ? "prefill" : "decode", dt_name(), nh, nkv,
	       hd, bs, rows, pad, n_seqs, (long long)ie.padded_batch, ie.split_kv ? "split KV" : "not split",
	       ie.cta_tile_q);
	CHECKF(ie.prefill == prefill, "the %s kernel ran, want the %s one", ie.prefill ? "prefill" : "decode",
	       prefill ? "prefill" : "decode");
	CHECKF(ie.padded_batch == ig.padded_batch && ie.split_kv == ig.split_kv && ie.cta_tile_q == ig.cta_tile_q,
	       "eager and graph plans differ");
	CHECKF(want_split < 0 || ie.split_kv == want_split, "%u rows: expected the %s kernel", rows,
	       want_split ? "split-KV" : "non-split");
	attention_ref(&t, nh, nkv, hd, bs, kf, vf, qf, ref, scratch);
	for (uint32_t r = 0; r < n; r++) {
		for (uint32_t i = 0; i < qd; i++) {
			a[i] = dec(o_fi[(size_t)r * qd + i]);
			b[i] = dec(o_rl[(size_t)r * qd + i]);
		}
		double e = rel_l2(a, ref + (size_t)r * qd, qd), x = rel_l2(a, b, qd);
		CHECKF(e < tol(1e-2) && x < tol(1e-2), "%s nh %u nkv %u hd %u row %u (pos %u): FlashInfer vs "
		       "reference %g, vs in-house %g", dt_name(), nh, nkv, hd, r, t.pos[r], e, x);
		if (e >= tol(1e-2) || x >= tol(1e-2))
			break;
	}
	size_t differ = 0, bad_pad = 0;
	for (size_t i = 0; i < od; i++)
		differ += o_fi[i] != o_gr[i];
	for (size_t i = (size_t)n * qd; i < od; i++)
		bad_pad += prefill ? (o_fi[i] != 0xffff) + (o_gr[i] != 0xffff)
				   : !isfinite(dec(o_fi[i])) + !isfinite(dec(o_gr[i]));
	CHECKF(!differ, "graph replay differs from the eager run in %zu of %zu values", differ, od);
	CHECKF(!bad_pad, "%zu values of the %u padding rows are %s", bad_pad, pad,
	       prefill ? "written (prefill writes its requests' rows only)" : "not finite");
	free(kc); free(vc); free(q); free(o_fi); free(o_gr); free(o_rl); free(kf); free(vf); free(qf); free(ref);
	free(a); free(b); free(scratch);
}

/* Each head shape first runs a lone long row, which always splits (graph-mode plans split
 * when rows x KV heads < the kernel's resident CTAs, FlashInfer's scheduler.cuh): its padded
 * batch P is that CTA count over the KV heads. Steps of fewer rows than P must split, of more
 * must not; the llama3-8b shape also runs a step of more than P rows (at least 40), so the
 * non-split kernel, which production uses from about 132 rows up on an H100, runs too. */
static void test_fi_decode(void)
{
	NEED_FI();
	static const struct { uint32_t nh, nkv, hd, bs, nblk, pad; } shapes[] = {
		{ 32, 8, 128, 16, 4096, 7 },    /* llama3-8b heads: group 4 */
		{ 8, 8, 64, 16, 4096, 0 },      /* MHA, head dim 64 */
		{ 32, 4, 128, 16, 4096, 3 },    /* group 8 */
		{ 8, 2, 64, 32, 2048, 1 },      /* block 32 */
	};
	uint32_t ctx[] = { 1, 15, 16, 17, 300, 2049, 8192, 33, 1000 }, one[] = { 5000 };
	static uint32_t many[TSEQS];
	int ran[2] = { 0, 0 };
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
		uint32_t nh = shapes[k].nh, nkv = shapes[k].nkv, hd = shapes[k].hd, bs = shapes[k].bs, nb = shapes[k].nblk;
		struct rl_cuda_fi_info lone, nine;
		lone.split_kv = nine.split_kv = -1;
		fi_case(nh, nkv, hd, bs, nb, NULL, one, 1, 0, TSEQS, 1, &lone);
		REQUIRE(lone.split_kv == 1 && lone.padded_batch >= 1);
		ran[1] = 1;
		uint32_t rows = 9 + shapes[k].pad, P = (uint32_t)lone.padded_batch;
		fi_case(nh, nkv, hd, bs, nb, NULL, ctx, 9, shapes[k].pad, TSEQS, rows < P ? 1 : rows > P ? 0 : -1, &nine);
		if (nine.split_kv >= 0)
			ran[nine.split_kv] = 1;
		if (k == 0) {
			uint32_t n = P + 8 > 40 ? P + 8 : 40;
			REQUIRE(n + 3 <= TSEQS);
			for (uint32_t i = 0; i < n; i++)
				many[i] = ctx[i % 9] % 700 + 1 + i;   /* ragged, up to ~1.2k keys */
			struct rl_cuda_fi_info big = { -1, -1, -1, -1 };
			fi_case(nh, nkv, hd, bs, nb, NULL, many, n, 3, TSEQS, n + 3 > P ? 0 : -1, &big);
			if (big.split_kv >= 0)
				ran[big.split_kv] = 1;
		}
	}
	CHECKF(ran[0] && ran[1], "both FlashInfer decode kernels must run (split-KV %s, non-split %s)",
	       ran[1] ? "ran" : "did not", ran[0] ? "ran" : "did not");
}

/* FlashInfer's prefill on steps with prefill chunks (--cuda-attn flashinfer runs every such
 * step on it, decode rows as one-row requests): chunks over cached prefixes starting mid-block,
 * a first chunk with no prefix, a long chunk beside a decode row, speculative-style short
 * chunks; every head shape; padding rows. Graph-mode plans always split the KV (then merge)
 * and pick the query tile from rows - requests + 1 (FlashInfer's scheduler.cuh), so the
 * geometries below (max_seqs, rows) reach each of the tiles 16, 64 and 128 the build has. */
static void test_fi_prefill(void)
{
	NEED_FI();
	static const struct { uint32_t nh, nkv, hd, bs, nblk; } shapes[] = {
		{ 32, 8, 128, 16, 2048 },       /* llama3-8b heads: group 4 */
		{ 8, 8, 64, 16, 2048 },         /* MHA, head dim 64 */
		{ 32, 4, 128, 16, 2048 },       /* group 8 */
		{ 8, 2, 64, 32, 1024 },         /* block 32 */
		{ 12, 4, 64, 16, 2048 },        /* group 3 */
	};
	uint32_t ql[] = { 1, 17, 70, 33, 5, 1, 1, 1, 1 }, ctx[] = { 1, 17, 100, 48, 300, 2, 16, 17, 129 };
	uint32_t ql_long[] = { 512, 1 }, ctx_long[] = { 3000, 2000 };
	uint32_t ql_first[] = { 300 }, ctx_first[] = { 300 };
	uint32_t ql_short[] = { 4, 2, 3, 1, 1 }, ctx_short[] = { 40, 800, 17, 5, 64 };
	int tiles[129] = { 0 };
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
		uint32_t nh = shapes[k].nh, nkv = shapes[k].nkv, hd = shapes[k].hd, bs = shapes[k].bs, nb = shapes[k].nblk;
		struct rl_cuda_fi_info in;
#define CASE(qls, ctxs, pad, max_seqs) do { in.cta_tile_q = -1;                                                \
		fi_case(nh, nkv, hd, bs, nb, qls, ctxs, sizeof qls / sizeof *qls, pad, max_seqs, 1, &in);            \
		if (rl_t_failed_now) return;                                                                        \
		if (in.cta_tile_q == 16 || in.cta_tile_q == 64 || in.cta_tile_q == 128) tiles[in.cta_tile_q] = 1; \
	} while (0)
		CASE(ql, ctx, 3, 64);            /* 133 rows, 64 requests: 70 rows x group, tile 128 */
		CASE(ql, ctx, 0, 9);             /* no padding request */
		if (k == 0)                      /* a 512-row chunk over 2488 cached keys (the CPU
						  * reference of it takes seconds: one shape) */
			CASE(ql_long, ctx_long, 5, 16);
		CASE(ql_first, ctx_first, 4, 64);
		CASE(ql_short, ctx_short, 0, 11);   /* 11 rows, 11 requests: one row each, tile 16 */
		CASE(ql_short, ctx_short, 13, 8);   /* 24 rows, 8 requests: 17 rows x group: tile 64 for
						     * groups 1 and 3, 128 for 4 and 8 */
#undef CASE
	}
	CHECKF(tiles[16] && tiles[64] && tiles[128], "every query tile must run (16 %s, 64 %s, 128 %s)",
	       tiles[16] ? "ran" : "did not", tiles[64] ? "ran" : "did not", tiles[128] ? "ran" : "did not");
}

static void test_sample(void)
{
	NEED_GPU();
	static struct tstep t;
	uint32_t vocab = 5000, n = 48;
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 64, 64, 64, 16, 512, 4, 4, vocab, 264);
	const struct rl_sampling sps[] = {
		{ 0, 1, 0, 0, 1 }, { 0.8f, 1, 0, 0, 2 }, { 1, 1, 1, 0, 3 }, { 1, 1, 5, 0, 4 },
		{ 1.3f, 1, 50, 0, 5 }, { 1, 0.5f, 0, 0, 6 }, { 0.7f, 0.9f, 0, 0, 7 }, { 1, 0.9f, 40, 0, 8 },
	};
	float *logits = malloc((size_t)n * vocab * 4), *masked = malloc((size_t)vocab * 4);
	int32_t ids[64];
	void *scratch = malloc(rl_sample_scratch_size(vocab));
	/* every third row constrained (structured output): a mask of about 1 in 16 tokens */
	static uint32_t allow[64][(5000 + 31) / 32];
	uint32_t agree = 0, total = 0, constrained = 0;
	const int rounds = emulated ? 2 : 4;     /* the emulator: half the draws, every row kind still */
	for (int round = 0; round < rounds; round++) {
		tstep_init(&t, 16);
		for (uint32_t i = 0; i < n; i++) {
			add_seq(&t, 1, 1 + i, 16, 64, 1, vocab, 1);
			t.seqs[i].sp = sps[i % 8];
			t.seqs[i].sp.seed += 100 * round;
			t.seqs[i].allow = NULL;
			if (i % 3 == (uint32_t)round % 3) {
				for (uint32_t w = 0; w < (vocab + 31) / 32; w++)
					allow[i][w] = (uint32_t)rnd() & (uint32_t)rnd() & (uint32_t)rnd() & (uint32_t)rnd();
				allow[i][0] |= 1u << (i % 32);
				t.seqs[i].allow = allow[i];
			}
		}
		for (size_t i = 0; i < (size_t)n * vocab; i++)
			logits[i] = 3 * frand() + (i % 97 == 0 ? 4 : 0);
		logits[7] = logits[9] = 50;                        /* a tie for greedy: lower id wins */
		/* greedy rows 8 and 16: ties across the split argmax's parts (157 ids each) */
		logits[8 * vocab + 4000] = logits[8 * vocab + 10] = 50;
		logits[16 * vocab + 4999] = logits[16 * vocab + 3001] = 50;
		for (uint32_t i = 0; i < 64; i++)
			ids[i] = -7;
		REQUIRE_API(api->sample(ids, logits, &g, &t.b, n, vocab));
		for (uint32_t i = 0; i < n; i++) {
			float *lg = masked;
			memcpy(lg, logits + (size_t)i * vocab, (size_t)vocab * 4);
			if (t.seqs[i].allow)
				rl_sample_mask(lg, vocab, t.seqs[i].allow);
			uint32_t want = rl_sample(lg, vocab, &t.seqs[i].sp, t.seqs[i].ctx_len, scratch);
			REQUIRE(ids[i] >= 0 && (uint32_t)ids[i] < vocab);
			if (t.seqs[i].allow) {
				CHECKF(t.seqs[i].allow[ids[i] / 32] >> (ids[i] % 32) & 1, "row %u drew %d, not allowed", i, ids[i]);
				constrained++;
			}
			if (!(t.seqs[i].sp.temperature > 0))
				CHECKF((uint32_t)ids[i] == want, "greedy row %u: %d want %u", i, ids[i], want);
			if (t.seqs[i].sp.top_k) {                 /* always inside the top k */
				uint32_t above = 0;
				for (uint32_t v = 0; v < vocab; v++)
					above += lg[v] > lg[ids[i]];
				CHECK(above < t.seqs[i].sp.top_k);
			}
			agree += (uint32_t)ids[i] == want;
			total++;
		}
	}
	/* the same draw as the CPU except where rounding of the sums moves it across a boundary */
	CHECKF(agree >= total - 2, "%u of %u draws equal the cpu's", agree, total);
	CHECK(constrained == (uint32_t)rounds * n / 3);
	free(logits); free(masked); free(scratch);
}

/* ---------------------------------------------------------------- whole model ----- */

static struct rl_backend_params model_params(void)
{
	return (struct rl_backend_params){ .n_kv_blocks = 512, .block_size = 16, .max_batch_tokens = 256,
					   .max_seqs = 16, .threads = 2, .runtime_cpu = -1 };
}

struct pair {
	struct rl_backend *cpu, *gpu;
};

static int use_fi;                    /* the gpu side runs with --cuda-attn flashinfer */

static int open_pair(struct pair *pr, struct rl_model *m, const char *buckets)
{
	struct rl_backend_params p = model_params();
	p.cuda_graph_buckets = buckets;
	p.cuda_dtype = dt;
	p.cuda_attn = use_fi;
	char err[512];
	int rc = rl_backend_cpu_create(m, &p, &pr->cpu, err, sizeof err);
	if (!rc && (rc = cuda_create(m, NULL, &p, &pr->gpu, err, sizeof err)))
		rl_backend_destroy(pr->cpu);
	if (rc)
		fprintf(stderr, "  %s\n", err);
	return rc;
}

/* One step; a failure prints the backend's own account of it (the CUDA call, FlashInfer's
 * message) for the cuda backend. */
static int run(struct rl_backend *be, const struct rl_batch *b, int32_t *out)
{
	int rc = rl_backend_launch(be, b);
	if (!rc)
		rc = rl_backend_finish(be, out);
	if (rc)
		fprintf(stderr, "  %s step of %u rows failed: %s (%s)\n", be->info.name, b->n_tokens, strerror(-rc),
			!strcmp(be->info.name, "cuda") ? cuda_last_error(be) : "-");
	return rc;
}

/* Prefill a prompt in two chunks, then greedy-decode n steps on both backends; logits of every
 * sampled row compared; returns the number of sampled steps whose tokens agree: equal, or a
 * near-tie, where the cpu's own logits of the two tokens differ by less than near_tie (2-byte
 * weights legitimately flip those: test_e2e_model measures one). The cpu's token is fed to
 * both, so a flip does not carry on. With want_tokens, a step that does not agree fails. */
static const uint32_t *cm_allow;      /* compare_model's decode steps: this constraint mask */

static uint32_t compare_model(struct rl_model *m, uint32_t n_decode, double tol, int want_tokens,
			      float near_tie, struct rl_cuda_stats *stats)
{
	struct pair pr;
	if (open_pair(&pr, m, NULL)) {
		CHECKF(0, "%s: creating the backends failed (above)", dt_name());
		return 0;
	}
	static struct tstep t;
	uint32_t V = m->cfg.vocab_size, prompt = 45, tok_cpu = 0, tok_gpu = 0, matched = 0;
	float *lc = malloc(V * 4), *lg = malloc(V * 4);
	for (uint32_t step = 0; step < 2 + n_decode; step++) {
		tstep_init(&t, 16);
		uint32_t q = step == 0 ? 30 : step == 1 ? prompt - 30 : 1;
		uint32_t ctx = step == 0 ? 30 : step == 1 ? prompt : prompt + step - 1;
		add_seq(&t, q, ctx, 16, 512, 0, V, step > 0);
		t.seqs[0].allow = step > 0 ? cm_allow : NULL;
		if (step >= 2)
			t.tokens[0] = tok_cpu;             /* feed the cpu's token to both */
		int32_t oc[1], og[1];
		if (run(pr.cpu, &t.b, oc) || run(pr.gpu, &t.b, og)) {
			CHECK(0);
			break;
		}
		if (step == 0)
			continue;
		CHECK(rl_backend_cpu_logits(pr.cpu, 0, lc) == 0);
		CHECK(cuda_logits(pr.gpu, 0, lg) == 0);
		if (cm_allow) {             /* both rows restricted alike; the rest compared below */
			int same = 1;
			for (uint32_t i = 0; i < V; i++)
				if (!(cm_allow[i / 32] >> (i % 32) & 1)) {
					same &= isinf(lc[i]) && lc[i] < 0 && isinf(lg[i]) && lg[i] < 0;
					lc[i] = lg[i] = 0;
				}
			CHECKF(same, "%s step %u: the logits rows are not restricted alike", dt_name(), step);
		}
		double e = rel_l2(lg, lc, V);
		CHECKF(e < tol, "%s step %u: logits rel err %g", dt_name(), step, e);
		tok_cpu = (uint32_t)oc[0];
		tok_gpu = (uint32_t)og[0];
		if (cm_allow)
			CHECKF(tok_gpu < V && (cm_allow[tok_gpu / 32] >> (tok_gpu % 32) & 1),
			       "%s step %u: token %u outside the constraint", dt_name(), step, tok_gpu);
		int agree = tok_cpu == tok_gpu || (tok_gpu < V && lc[tok_cpu] - lc[tok_gpu] < near_tie);
		if (want_tokens)
			CHECKF(agree, "%s step %u: greedy token %u, cpu %u (cpu logits %g vs %g)", dt_name(), step,
			       tok_gpu, tok_cpu, lc[tok_cpu], tok_gpu < V ? lc[tok_gpu] : NAN);
		matched += agree;
		if (e >= tol)
			break;
	}
	free(lc); free(lg);
	if (stats)
		CHECK(cuda_stats(pr.gpu, stats) == 0);
	rl_backend_destroy(pr.cpu);
	rl_backend_destroy(pr.gpu);
	return matched;
}

static void test_model_stories260k(void)
{
	NEED_GPU();
	const char *path = rl_t_model("stories260K.bin"), *tok = rl_t_model("tok512.bin");
	if (!path || !tok)
		SKIP("stories260K.bin / tok512.bin not found (set RINGLM_MODELS)");
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_load(path, tok, &m, err, sizeof err) == 0);
	/* near-ties: on the emulator, other random prompts flipped cpu margins of 0.003..0.023 under
	 * bf16 and of 0.002 under fp16 (this one flips none) */
	uint32_t matched = compare_model(m, 40, tol(2e-2), 1, (float)tol(0.05), NULL);
	CHECKF(matched == 41, "%s greedy tokens: %u of 41 agree with the cpu's", dt_name(), matched);
	rl_model_destroy(m);
}

static void test_model_synthetic(void)
{
	NEED_GPU();
	/* mid-size GQA shape: 4 layers, dim 512, 8 heads over 2 kv heads, head_dim 64, halves RoPE */
	struct rl_model_config c = { .dim = 512, .hidden_dim = 1376, .n_layers = 4, .n_heads = 8,
		.n_kv_heads = 2, .head_dim = 64, .vocab_size = 4096, .max_ctx = 2048, .rope_theta = 500000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 0,
		.bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 7);
	compare_model(m, 8, tol(3e-2), 0, 0, NULL);
	rl_model_destroy(m);
}

/* Structured output through the whole backend (pack, mask copy, graph and eager): with a
 * constraint allowing about 1 token in 16, every greedy token of the cuda backend is allowed
 * and is the cpu's (or a near-tie between allowed tokens), step after step. */
static void test_model_constrained(void)
{
	NEED_GPU();
	struct rl_model_config c = { .dim = 256, .hidden_dim = 688, .n_layers = 2, .n_heads = 4,
		.n_kv_heads = 2, .head_dim = 64, .vocab_size = 4000, .max_ctx = 1024, .rope_theta = 10000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 1, .bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 11);
	static uint32_t allow[(4000 + 31) / 32];
	for (uint32_t w = 0; w < (4000 + 31) / 32; w++)
		allow[w] = (uint32_t)rnd() & (uint32_t)rnd() & (uint32_t)rnd() & (uint32_t)rnd();
	cm_allow = allow;
	uint32_t matched = compare_model(m, 12, tol(3e-2), 0, (float)tol(0.05), NULL);
	cm_allow = NULL;
	CHECKF(matched >= 11, "%s constrained greedy tokens: %u of 13 agree with the cpu's", dt_name(), matched);
	rl_model_destroy(m);
}

/* Qwen3: per-head q/k norms before RoPE (in rope_kv), 8 heads of 64 over a width of 256
 * (head_dim is not dim / heads), GQA 4; logits against the cpu backend's. */
static void test_model_qwen3(void)
{
	NEED_GPU();
	struct rl_model_config c = { .dim = 256, .hidden_dim = 512, .n_layers = 3, .n_heads = 8,
		.n_kv_heads = 2, .head_dim = 64, .vocab_size = 2048, .max_ctx = 2048, .rope_theta = 1000000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-6f, .rope_halves = 1, .has_qk_norm = 1, .tied_embeddings = 1,
		.bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 9);
	compare_model(m, 8, tol(3e-2), 0, 0, NULL);
	rl_model_destroy(m);
}

/* The same model through --cuda-attn flashinfer: its two prefill chunks take FlashInfer's
 * prefill kernel (the second over the first's cached keys), its decode steps the decode one,
 * each replayed from its bucket's FlashInfer graph; logits against the cpu's. A plan that
 * differed from the captured one would fall back to an eager step, and no step may quietly
 * skip FlashInfer: every step is counted on a FlashInfer graph. */
static void test_model_fi(void)
{
	NEED_FI();
	struct rl_model_config c = { .dim = 512, .hidden_dim = 1376, .n_layers = 4, .n_heads = 8,
		.n_kv_heads = 2, .head_dim = 64, .vocab_size = 4096, .max_ctx = 2048, .rope_theta = 500000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 0,
		.bos_id = 1, .eos_id = 2 };
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 7);
	use_fi = 1;
	struct rl_cuda_stats st = { 0 };
	uint32_t n_decode = 8;
	compare_model(m, n_decode, tol(3e-2), 0, 0, &st);
	use_fi = 0;
	printf("  steps: %llu graph, %llu eager; FlashInfer decode %llu graph, %llu eager; prefill %llu graph, "
	       "%llu eager\n", (unsigned long long)st.graph_steps, (unsigned long long)st.eager_steps,
	       (unsigned long long)st.fi_graph_steps, (unsigned long long)st.fi_eager_steps,
	       (unsigned long long)st.fi_prefill_graph_steps, (unsigned long long)st.fi_prefill_eager_steps);
	CHECKF(st.fi_graph_steps == n_decode && st.fi_eager_steps == 0,
	       "%s: %u decode steps, FlashInfer ran %llu from graphs and %llu eagerly", dt_name(), n_decode,
	       (unsigned long long)st.fi_graph_steps, (unsigned long long)st.fi_eager_steps);
	CHECKF(st.fi_prefill_graph_steps == 2 && st.fi_prefill_eager_steps == 0 && st.graph_steps + st.eager_steps == 0,
	       "%s: 2 prefill steps, FlashInfer prefill ran %llu from graphs and %llu eagerly, the in-house "
	       "attention %llu", dt_name(), (unsigned long long)st.fi_prefill_graph_steps,
	       (unsigned long long)st.fi_prefill_eager_steps, (unsigned long long)(st.graph_steps + st.eager_steps));
	rl_model_destroy(m);
}

/* Graph replay vs eager (same padded rows), bit for bit, on prefill and decode steps. */
static void test_graph_equals_eager(void)
{
	NEED_GPU();
	struct rl_model_config c;
	REQUIRE(rl_model_shape("tiny", &c) == 0);
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 3);
	struct pair pr;
	REQUIRE(open_pair(&pr, m, "1,2,4,8,16,32,64") == 0);
	static struct tstep t;
	uint32_t V = c.vocab_size;
	float *a = malloc(V * 4), *b = malloc(V * 4);
	uint32_t shapes[][2] = { { 20, 20 }, { 1, 21 }, { 1, 22 }, { 38, 60 } };
	for (int k = 0; k < 4; k++) {
		tstep_init(&t, 16);
		add_seq(&t, shapes[k][0], shapes[k][1], 16, 512, 0, V, 1);
		add_seq(&t, 1, 5 + k, 16, 512, 0, V, 1);
		t.b.n_prefill = 1;
		int32_t o1[2], o2[2];
		cuda_set_graphs(pr.gpu, 1);
		REQUIRE(run(pr.gpu, &t.b, o1) == 0);
		REQUIRE(cuda_logits(pr.gpu, 0, a) == 0);
		cuda_set_graphs(pr.gpu, 0);                /* the same step again, eagerly */
		REQUIRE(run(pr.gpu, &t.b, o2) == 0);
		REQUIRE(cuda_logits(pr.gpu, 0, b) == 0);
		CHECKF(!memcmp(a, b, V * 4), "%s step %d: graph and eager logits differ", dt_name(), k);
		CHECK(o1[0] == o2[0] && o1[1] == o2[1]);
	}
	free(a); free(b);
	rl_backend_destroy(pr.cpu);
	rl_backend_destroy(pr.gpu);
	rl_model_destroy(m);
}

/* The gap between the best and second-best logit: a greedy token may flip below it when two
 * paths round differently */
static float top2_gap(const float *l, uint32_t n)
{
	float a = -INFINITY, b = -INFINITY;
	for (uint32_t i = 0; i < n; i++) {
		if (l[i] > a) {
			b = a;
			a = l[i];
		} else if (l[i] > b) {
			b = l[i];
		}
	}
	return a - b;
}

/* A mixed batch (prefill chunk + decode rows) equals each sequence run alone, on model c. */
static void mixed_equals_alone(const struct rl_model_config *cfg)
{
	struct rl_model_config c = *cfg;
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 5);
	struct pair pr;
	REQUIRE(open_pair(&pr, m, NULL) == 0);
	static struct tstep t, one;
	uint32_t V = c.vocab_size;
	float *alone = malloc(3 * V * 4), *mixed = malloc(V * 4);
	/* three sequences with disjoint blocks: fill their prefixes first, one at a time */
	uint32_t ctx0[3] = { 10, 40, 3 };
	for (int i = 0; i < 3; i++) {
		tstep_init(&one, 16);
		one.b.n_seqs = (uint32_t)i;                /* seq i's block table row */
		one.b.n_tokens = 0;
		add_seq(&one, ctx0[i], ctx0[i], 16, 512, 0, V, 0);
		one.seqs[0] = one.seqs[i];
		memmove(one.bt[0], one.bt[i], sizeof one.bt[0]);
		one.seqs[0].block_table = one.bt[0];
		memset(one.row_seq, 0, ctx0[i] * 4);
		one.b.n_seqs = 1;
		one.b.n_prefill = 1;
		int32_t o[1];
		REQUIRE(run(pr.gpu, &one.b, o) == 0);
	}
	/* the step: seq 0 prefill chunk of 12, seqs 1, 2 decode; alone and mixed */
	tstep_init(&t, 16);
	add_seq(&t, 12, 22, 16, 512, 0, V, 1);
	add_seq(&t, 1, 41, 16, 512, 0, V, 1);
	add_seq(&t, 1, 4, 16, 512, 0, V, 1);
	t.b.n_prefill = 1;
	int32_t solo_tok[3];
	for (int i = 0; i < 3; i++) {
		tstep_init(&one, 16);
		one.seqs[0] = t.seqs[i];
		one.seqs[0].q_start = 0;
		memcpy(one.tokens, t.tokens + t.seqs[i].q_start, t.seqs[i].q_len * 4);
		memcpy(one.pos, t.pos + t.seqs[i].q_start, t.seqs[i].q_len * 4);
		memset(one.row_seq, 0, t.seqs[i].q_len * 4);
		one.b = (struct rl_batch){ t.seqs[i].q_len, 1, i == 0, 16, one.tokens, one.pos, one.row_seq, one.seqs, 0 };
		int32_t o[1];
		REQUIRE(run(pr.gpu, &one.b, o) == 0);
		REQUIRE(cuda_logits(pr.gpu, 0, alone + (size_t)i * V) == 0);
		solo_tok[i] = o[0];
	}
	int32_t o[3];
	REQUIRE(run(pr.gpu, &t.b, o) == 0);
	for (int i = 0; i < 3; i++) {
		REQUIRE(cuda_logits(pr.gpu, (uint32_t)i, mixed) == 0);
		double e = rel_l2(mixed, alone + (size_t)i * V, V);
		/* different GEMM shapes (and under FlashInfer, its decode kernel alone and its
		 * prefill kernel mixed) may round differently; nothing more */
		CHECKF(e < tol(1e-2), "%s seq %d: mixed vs alone rel err %g", dt_name(), i, e);
		CHECKF(o[i] == solo_tok[i] || top2_gap(alone + (size_t)i * V, V) < 1e-2f,
		       "%s seq %d: token %d mixed, %d alone", dt_name(), i, o[i], solo_tok[i]);
	}
	free(alone); free(mixed);
	rl_backend_destroy(pr.cpu);
	rl_backend_destroy(pr.gpu);
	rl_model_destroy(m);
}

static void test_mixed_equals_alone(void)
{
	NEED_GPU();
	struct rl_model_config c;
	REQUIRE(rl_model_shape("tiny", &c) == 0);
	mixed_equals_alone(&c);
}

/* The same through --cuda-attn flashinfer (head dim 64): the mixed step runs FlashInfer's
 * prefill kernel with the decode rows as one-row requests; alone, the decode rows take its
 * decode kernel. */
static void test_mixed_equals_alone_fi(void)
{
	NEED_FI();
	struct rl_model_config c = { .dim = 512, .hidden_dim = 1376, .n_layers = 4, .n_heads = 8,
		.n_kv_heads = 2, .head_dim = 64, .vocab_size = 4096, .max_ctx = 2048, .rope_theta = 500000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 1, .tied_embeddings = 0,
		.bos_id = 1, .eos_id = 2 };
	use_fi = 1;
	mixed_equals_alone(&c);
	use_fi = 0;
}

/* ---------------------------------------------------------------- deterministic model */

/* One sequence of a deterministic step under construction: q_len rows ending at ctx, blocks
 * first_block, first_block + 1, ... (each sequence its own), tokens toks (NULL: random). */
struct dseq {
	uint32_t q_len, ctx, sample, first_block, n_draft;
	const uint32_t *toks;
	int32_t *draft_out;
	struct rl_sampling sp;
};

/* Appends d to t (chunks before decode rows, as rl_batch.h wants: callers add them so). */
static void det_add(struct tstep *t, const struct dseq *d, uint32_t vocab)
{
	uint32_t i = t->b.n_seqs++, row = t->b.n_tokens;
	struct rl_batch_seq *s = &t->seqs[i];
	memset(s, 0, sizeof *s);
	s->q_start = row; s->q_len = d->q_len; s->ctx_len = d->ctx;
	s->n_blocks = (d->ctx + 15) / 16;
	for (uint32_t k = 0; k < s->n_blocks; k++)
		t->bt[i][k] = d->first_block + k;
	s->block_table = t->bt[i];
	s->sample = d->sample; s->seq_id = i; s->sp = d->sp;
	s->n_draft = d->n_draft; s->draft_out = d->draft_out;
	for (uint32_t r = 0; r < d->q_len; r++) {
		t->tokens[row + r] = d->toks ? d->toks[r] : (uint32_t)(rnd() % vocab);
		t->pos[row + r] = d->ctx - d->q_len + r;
		t->row_seq[row + r] = i;
	}
	t->b.n_tokens += d->q_len;
	if (d->q_len > 1)
		t->b.n_prefill = i + 1;
	t->b.tokens = t->tokens; t->b.pos = t->pos; t->b.row_seq = t->row_seq; t->b.seqs = t->seqs;
	t->b.block_size = 16;
	t->b.deterministic = 1;
}

#define DET_PROMPT 300
#define DET_GEN 4

/* The target sequence's run: its prompt in the chunks `chunks` (0-terminated), then DET_GEN - 1
 * decode steps feeding back its sampled tokens; with_others adds two sequences of other
 * lengths to each step (a prefill chunk, then a decode row of a long context, the target's
 * decode row between the others'). tok[j], logits[j]: the token sampled for position
 * DET_PROMPT + j and the logits it was drawn from. 0, or -1 after a failed check. */
static int det_run(struct rl_backend *be, const uint32_t *prompt, const uint32_t *chunks, int with_others,
		   uint32_t V, int32_t *tok, float *logits)
{
	static struct tstep t;
	const struct rl_sampling sp = { 0.9f, 0.95f, 0, 0, 1234 }, osp = { 0.7f, 1.0f, 5, 0, 99 };
	uint32_t done = 0, step = 0, b_ctx = 20;
	for (uint32_t c = 0; done < DET_PROMPT + DET_GEN - 1; step++) {
		tstep_init(&t, 16);
		const int prefill = done < DET_PROMPT;
		const uint32_t q = prefill ? chunks[c++] : 1;
		const uint32_t ctx = done + q, last = ctx == DET_PROMPT;
		struct dseq tg = { q, ctx, prefill ? last : 1, 0, 0, prefill ? prompt + done : NULL, NULL, sp };
		uint32_t fed;
		if (!prefill) {            /* the token sampled last, at position done */
			fed = (uint32_t)tok[done - DET_PROMPT];
			tg.toks = &fed;
		}
		struct dseq ob = { with_others && step % 2 == 0 ? 9 + step : 1, 0, 1, 100, 0, NULL, NULL, osp };
		struct dseq oc = { 1, 700 + step, 1, 200, 0, NULL, NULL, osp };
		ob.ctx = b_ctx += ob.q_len;
		uint32_t target = 0;
		if (q > 1)
			det_add(&t, &tg, V);
		if (with_others && ob.q_len > 1)
			det_add(&t, &ob, V);
		if (with_others)
			det_add(&t, &oc, V);
		if (q == 1) {
			target = t.b.n_seqs;
			det_add(&t, &tg, V);
		}
		if (with_others && ob.q_len == 1)
			det_add(&t, &ob, V);
		int32_t out[3];
		if (run(be, &t.b, out))
			return -1;
		done = ctx;
		if (tg.sample) {
			const uint32_t j = ctx - DET_PROMPT;
			tok[j] = out[target];
			if (cuda_logits(be, target, logits + (size_t)j * V))
				return -1;
		}
	}
	return 0;
}

/* The deterministic mode through the whole backend (rl_batch.deterministic = 1 in every step,
 * graphs on): one sequence's logits (bit for bit) and sampled tokens (temperature 0.9, top-p
 * 0.95, so the draw reads every logit) are the same (a) prefilled in one chunk and decoded
 * alone, (b) in steps shared with two other sequences of other lengths, (c) with its prompt cut
 * into chunks of 7, 100 and 193, (d) as (a) with graphs off (eager steps), and (e) verifying (a)'s
 * first three tokens as speculative drafts after a prompt of DET_PROMPT - 1 tokens: draft_out
 * gets (a)'s tokens and the last row (a)'s fourth token and its logits. And (a)'s first logits
 * are near the default mode's. The model is small enough for the emulator; cfg picks the
 * attention kernel (hd % 16 == 0: tensor cores). */
static void model_det(const struct rl_model_config *cfg)
{
	struct rl_model_config c = *cfg;
	struct rl_model *m;
	char err[512];
	REQUIRE(rl_model_alloc(&c, &m, err, sizeof err) == 0);
	rl_model_fill_random(m, 13);
	struct rl_backend_params p = { .n_kv_blocks = 512, .block_size = 16, .max_batch_tokens = 512,
				       .max_seqs = 8, .threads = 2, .runtime_cpu = -1, .max_draft_rows = 8,
				       .cuda_dtype = dt };
	struct rl_backend *be;
	if (cuda_create(m, NULL, &p, &be, err, sizeof err)) {
		fprintf(stderr, "  %s\n", err);
		CHECK(0);
		rl_model_destroy(m);
		return;
	}
	const uint32_t V = c.vocab_size;
	uint32_t prompt[DET_PROMPT];
	for (uint32_t i = 0; i < DET_PROMPT; i++)
		prompt[i] = (uint32_t)(rnd() % V);
	int32_t tok[5][DET_GEN];
	float *lg = malloc((size_t)5 * DET_GEN * V * 4);
	static const uint32_t one_chunk[] = { DET_PROMPT, 0 }, chunked[] = { 7, 100, 193, 0 };
	static const char *what[] = { "alone", "with others", "chunked 7+100+193", "eagerly" };
	int ok = det_run(be, prompt, one_chunk, 0, V, tok[0], lg) == 0 &&
		 det_run(be, prompt, one_chunk, 1, V, tok[1], lg + (size_t)DET_GEN * V) == 0 &&
		 det_run(be, prompt, chunked, 0, V, tok[2], lg + (size_t)2 * DET_GEN * V) == 0;
	if (ok) {
		cuda_set_graphs(be, 0);
		ok = det_run(be, prompt, one_chunk, 1, V, tok[3], lg + (size_t)3 * DET_GEN * V) == 0;
		cuda_set_graphs(be, 1);
	}
	CHECKF(ok, "%s: a deterministic run failed (above)", dt_name());
	for (int k = 1; ok && k < 4; k++)
		for (uint32_t j = 0; j < DET_GEN; j++) {
			CHECKF(tok[k][j] == tok[0][j], "%s %s: token %u is %d, alone %d", dt_name(), what[k], j, tok[k][j],
			       tok[0][j]);
			CHECKF(!memcmp(lg + ((size_t)k * DET_GEN + j) * V, lg + (size_t)j * V, (size_t)V * 4),
			       "%s %s: the logits of token %u differ from the lone run's", dt_name(), what[k], j);
		}
	/* (e) speculative verification: the prompt but its last token, then one step of that token
	 * and (a)'s first DET_GEN - 1 tokens as drafts */
	static struct tstep t;
	const struct rl_sampling sp = { 0.9f, 0.95f, 0, 0, 1234 };
	uint32_t vt[DET_GEN];
	vt[0] = prompt[DET_PROMPT - 1];
	for (uint32_t j = 1; j < DET_GEN; j++)
		vt[j] = (uint32_t)tok[0][j - 1];
	int32_t draft_out[DET_GEN - 1] = { -1, -1, -1 }, out[1] = { -1 };
	struct dseq pre = { DET_PROMPT - 1, DET_PROMPT - 1, 0, 0, 0, prompt, NULL, sp };
	struct dseq ver = { DET_GEN, DET_PROMPT - 1 + DET_GEN, 1, 0, DET_GEN - 1, vt, draft_out, sp };
	tstep_init(&t, 16);
	det_add(&t, &pre, V);
	if (ok && !run(be, &t.b, out)) {
		tstep_init(&t, 16);
		det_add(&t, &ver, V);
		if (!run(be, &t.b, out)) {
			for (uint32_t j = 0; j + 1 < DET_GEN; j++)
				CHECKF(draft_out[j] == tok[0][j], "%s drafts: token %u is %d, alone %d", dt_name(), j,
				       draft_out[j], tok[0][j]);
			CHECKF(out[0] == tok[0][DET_GEN - 1], "%s drafts: the last row's token %d, alone %d", dt_name(), out[0],
			       tok[0][DET_GEN - 1]);
			float *l = lg + (size_t)4 * DET_GEN * V;
			CHECK(cuda_logits(be, 0, l) == 0);
			CHECKF(!memcmp(l, lg + (size_t)(DET_GEN - 1) * V, (size_t)V * 4),
			       "%s drafts: the last row's logits differ from the lone run's", dt_name());
		} else {
			CHECK(0);
		}
	} else {
		CHECK(!ok);        /* a failed prefill is a failure; a failed run above is already one */
		ok = 0;
	}
	/* the mode computes the model, not just the same bits: its first logits are near the
	 * default mode's (cuBLAS, the split-KV attention) for the same prompt */
	if (ok) {
		struct dseq pf = { DET_PROMPT, DET_PROMPT, 1, 0, 0, prompt, NULL, sp };
		tstep_init(&t, 16);
		det_add(&t, &pf, V);
		t.b.deterministic = 0;
		float *l = lg + (size_t)4 * DET_GEN * V;
		if (!run(be, &t.b, out) && !cuda_logits(be, 0, l)) {
			double e = rel_l2(lg, l, V);
			CHECKF(e < tol(1e-2), "%s: deterministic vs default logits rel err %g", dt_name(), e);
		} else {
			CHECK(0);
		}
	}
	struct rl_cuda_stats st;
	CHECK(cuda_stats(be, &st) == 0);
	CHECKF(st.det_steps + !!ok == st.steps && st.det_graphs > 0 && st.graph_steps > 0 && st.eager_steps > 0,
	       "%s: %llu of %llu steps deterministic (all but the default one), %llu graphs captured for them, "
	       "%llu replayed, %llu eager", dt_name(), (unsigned long long)st.det_steps, (unsigned long long)st.steps,
	       (unsigned long long)st.det_graphs, (unsigned long long)st.graph_steps, (unsigned long long)st.eager_steps);
	free(lg);
	rl_backend_destroy(be);
	rl_model_destroy(m);
}

static void test_model_det(void)
{
	NEED_GPU();
	if (emulated && dt == RL_CUDA_FP16)    /* the same paths as bf16: the emulator runs one */
		SKIP("fp16 on the emulator (bf16 runs the same paths; a GPU runs both)");
	/* head_dim 32: the tensor-core attention for every item, GQA 2 */
	struct rl_model_config c = { .dim = 128, .hidden_dim = 344, .n_layers = 2, .n_heads = 4,
		.n_kv_heads = 2, .head_dim = 32, .vocab_size = 512, .max_ctx = 1024, .rope_theta = 10000.0f,
		.rope_scale = 1.0f, .norm_eps = 1e-5f, .rope_halves = 1, .bos_id = 1, .eos_id = 2 };
	model_det(&c);
	/* stories260K's shape: head_dim 8, the CUDA-core attention for every item */
	REQUIRE(rl_model_shape("tiny", &c) == 0);
	model_det(&c);
}

BOTH_DTYPES(test_embed)
BOTH_DTYPES(test_add_rmsnorm)
BOTH_DTYPES(test_rope_kv)
BOTH_DTYPES(test_swiglu)
BOTH_DTYPES(test_attention_mixed)
BOTH_DTYPES(test_attention_long)
BOTH_DTYPES(test_gemm_det)
BOTH_DTYPES(test_attention_det)
BOTH_DTYPES(test_fi_decode)
BOTH_DTYPES(test_fi_prefill)
BOTH_DTYPES(test_model_fi)
BOTH_DTYPES(test_model_stories260k)
BOTH_DTYPES(test_model_synthetic)
BOTH_DTYPES(test_model_constrained)
BOTH_DTYPES(test_model_qwen3)
BOTH_DTYPES(test_graph_equals_eager)
BOTH_DTYPES(test_mixed_equals_alone)
BOTH_DTYPES(test_mixed_equals_alone_fi)
BOTH_DTYPES(test_model_det)

int main(void)
{
	open_lib();
	RUN(test_embed_bf16);
	RUN(test_embed_fp16);
	RUN(test_add_rmsnorm_bf16);
	RUN(test_add_rmsnorm_fp16);
	RUN(test_rope_kv_bf16);
	RUN(test_rope_kv_fp16);
	RUN(test_swiglu_bf16);
	RUN(test_swiglu_fp16);
	RUN(test_attention_mixed_bf16);
	RUN(test_attention_mixed_fp16);
	RUN(test_attention_long_bf16);
	RUN(test_attention_long_fp16);
	RUN(test_gemm_det_bf16);
	RUN(test_gemm_det_fp16);
	RUN(test_attention_det_bf16);
	RUN(test_attention_det_fp16);
	RUN(test_fi_decode_bf16);
	RUN(test_fi_decode_fp16);
	RUN(test_fi_prefill_bf16);
	RUN(test_fi_prefill_fp16);
	RUN(test_sample);
	RUN(test_model_stories260k_bf16);
	RUN(test_model_stories260k_fp16);
	RUN(test_model_synthetic_bf16);
	RUN(test_model_synthetic_fp16);
	RUN(test_model_constrained_bf16);
	RUN(test_model_constrained_fp16);
	RUN(test_model_qwen3_bf16);
	RUN(test_model_qwen3_fp16);
	RUN(test_model_fi_bf16);
	RUN(test_model_fi_fp16);
	RUN(test_graph_equals_eager_bf16);
	RUN(test_graph_equals_eager_fp16);
	RUN(test_mixed_equals_alone_bf16);
	RUN(test_mixed_equals_alone_fp16);
	RUN(test_mixed_equals_alone_fi_bf16);
	RUN(test_mixed_equals_alone_fi_fp16);
	RUN(test_model_det_bf16);
	RUN(test_model_det_fp16);
	TEST_MAIN_END();
}
