/* cuda_testapi.c — kernel test entry points for tests/gpu (see rl_cuda_api.h): each uploads
 * host arrays (outputs too, so a test's poison reaches the device), packs the step metadata
 * with the backend's own packer, runs one launcher and copies the outputs back. The first
 * call that fails in a scope is named with its message in this thread's last error, which
 * the tests print: a GPU run is too rare to come back with a bare -EIO. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "runtime/cuda/rl_cuda_api.h"
#include "kernels/rl_cuda_ops.h"
#include "kernels/rl_cuda_fi.h"
#include "kernels/rl_sample.h"          /* rl_sample_mask_words */

#define EXPORT __attribute__((visibility("default")))
#define MAXBUF 16

struct scope {                         /* device buffers of one call, freed together */
	void *dev[MAXBUF];
	int n, failed;
};

static __thread char last_err[512];

static const char *t_last_error(void)
{
	return last_err;
}

/* Marks the scope failed; the first failure of a call names itself in last_err. */
static void failf(struct scope *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(struct scope *s, const char *fmt, ...)
{
	if (!s->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(last_err, sizeof last_err, fmt, ap);
		va_end(ap);
	}
	s->failed = 1;
}

/* e != cudaSuccess fails the scope as "what: message"; returns whether it is still good. */
static int ok(struct scope *s, cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		failf(s, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
	return !s->failed;
}

static void *up(struct scope *s, const void *host, size_t bytes)
{
	void *d = NULL;
	if (s->failed)
		return NULL;
	if (s->n == MAXBUF) {
		failf(s, "test scope: more than %d device buffers", MAXBUF);
		return NULL;
	}
	if (!ok(s, cudaMalloc(&d, bytes ? bytes : 1), "cudaMalloc"))
		return NULL;
	s->dev[s->n++] = d;
	if (host)
		ok(s, cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
	return d;
}

static void down(struct scope *s, void *host, const void *dev, size_t bytes)
{
	if (!s->failed)
		ok(s, cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

static int end(struct scope *s)
{
	if (!s->failed && ok(s, cudaGetLastError(), "a kernel launch"))
		ok(s, cudaDeviceSynchronize(), "a kernel (cudaDeviceSynchronize)");
	for (int i = 0; i < s->n; i++)
		cudaFree(s->dev[i]);
	return s->failed ? -EIO : 0;
}

/* Packs (g, b, rows) and uploads it; *m points into the device copy. */
static int meta(struct scope *s, const struct rl_cuda_geom *g, const struct rl_batch *b, uint32_t rows,
		struct rl_cuda_meta *m, struct rl_cuda_hdr *hdr)
{
	struct rl_cuda_layout l;
	rl_cuda_host_layout(g, &l);
	void *img = malloc(l.max_bytes);
	uint32_t *samp_seq = malloc(g->max_samp * sizeof *samp_seq);
	int32_t *samp_draft = malloc(g->max_samp * sizeof *samp_draft);
	size_t bytes = 0;
	int rc = img && samp_seq && samp_draft ? rl_cuda_host_pack(g, &l, b, rows, img, &bytes, samp_seq, samp_draft)
					       : -ENOMEM;
	uint32_t *masks = NULL;
	if (rc)
		failf(s, "packing the step: %s", strerror(-rc));
	else if (!(masks = malloc((size_t)g->max_samp * rl_sample_mask_words(g->vocab) * sizeof *masks)))
		rc = -ENOMEM, failf(s, "packing the step: %s", strerror(ENOMEM));
	else {
		/* the constraint masks, as the backend packs them (their device copy when any) */
		const uint32_t n_masks = rl_cuda_host_pack_masks(g, &l, b, img, samp_seq, samp_draft, masks);
		void *d = up(s, img, l.max_bytes);
		*m = rl_cuda_host_meta_at(&l, d);
		m->masks = n_masks ? up(s, masks, (size_t)n_masks * rl_sample_mask_words(g->vocab) * sizeof *masks) : NULL;
		if (hdr)
			memcpy(hdr, img, sizeof *hdr);
	}
	free(masks);
	free(img);
	free(samp_seq);
	free(samp_draft);
	return rc;
}

static int t_embed(float *x, const uint16_t *emb, uint32_t vocab, const struct rl_cuda_geom *g,
		   const struct rl_batch *b, uint32_t rows, uint32_t dim, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	struct rl_cuda_meta m;
	int rc = meta(&s, g, b, rows, &m, NULL);
	if (rc)
		return end(&s), rc;
	float *dx = up(&s, x, (size_t)rows * dim * 4);
	uint16_t *de = up(&s, emb, (size_t)vocab * dim * 2);
	if (!s.failed)
		rl_cuda_embed(dx, de, m, rows, dim, dt, 0);
	down(&s, x, dx, (size_t)rows * dim * 4);
	return end(&s);
}

static int t_add_rmsnorm(uint16_t *out, float *x, const float *delta, const float *w,
			 const int32_t *row_map, uint32_t rows, uint32_t x_rows, uint32_t dim,
			 float eps, int write_x, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	uint16_t *dout = up(&s, out, (size_t)rows * dim * 2);
	float *dx = up(&s, x, (size_t)x_rows * dim * 4);
	float *dd = delta ? up(&s, delta, (size_t)x_rows * dim * 4) : NULL;
	float *dw = up(&s, w, dim * 4);
	int32_t *dm = row_map ? up(&s, row_map, rows * 4) : NULL;
	if (!s.failed)
		rl_cuda_add_rmsnorm(dout, dx, dd, dw, dm, rows, dim, eps, write_x, dt, 0);
	down(&s, out, dout, (size_t)rows * dim * 2);
	down(&s, x, dx, (size_t)x_rows * dim * 4);
	return end(&s);
}

static int t_rope_kv(uint16_t *q_out, uint16_t *kc, uint16_t *vc, size_t cache_elems,
		     const uint16_t *qkv, const float *bias, const float *inv_freq,
		     const struct rl_cuda_geom *g, const struct rl_batch *b, uint32_t rows,
		     uint32_t nh, uint32_t hd, float rope_scale, int halves, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	struct rl_cuda_meta m;
	int rc = meta(&s, g, b, rows, &m, NULL);
	if (rc)
		return end(&s), rc;
	uint32_t nkv = g->n_kv_heads, width = (nh + 2 * nkv) * hd;
	uint16_t *dq = up(&s, q_out, (size_t)rows * nh * hd * 2);
	uint16_t *dk = up(&s, kc, cache_elems * 2), *dv = up(&s, vc, cache_elems * 2);
	uint16_t *dqkv = up(&s, qkv, (size_t)rows * width * 2);
	float *db = bias ? up(&s, bias, width * 4) : NULL;
	float *df = up(&s, inv_freq, hd / 2 * 4);
	if (!s.failed)
		rl_cuda_rope_kv(dq, dk, dv, dqkv, db, df, m, rows, nh, nkv, hd, g->block_size, rope_scale, halves,
				NULL, 0.0f, dt, 0);
	down(&s, q_out, dq, (size_t)rows * nh * hd * 2);
	down(&s, kc, dk, cache_elems * 2);
	down(&s, vc, dv, cache_elems * 2);
	return end(&s);
}

static int t_gemm_det(void *Y, int y_f32, const uint16_t *X, const uint16_t *W, uint32_t rows, uint32_t in,
		      uint32_t out, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	const size_t y_bytes = (size_t)rows * out * (y_f32 ? 4 : 2);
	void *dy = up(&s, Y, y_bytes);
	uint16_t *dx = up(&s, X, (size_t)rows * in * 2), *dw = up(&s, W, (size_t)out * in * 2);
	if (!s.failed)
		rl_cuda_gemm_det(dy, y_f32, dx, dw, rows, in, out, dt, 0);
	down(&s, Y, dy, y_bytes);
	return end(&s);
}

static int t_swiglu(uint16_t *h, const uint16_t *gu, uint32_t rows, uint32_t hid, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	uint16_t *dh = up(&s, h, (size_t)rows * hid * 2), *dgu = up(&s, gu, (size_t)rows * 2 * hid * 2);
	if (!s.failed)
		rl_cuda_swiglu(dh, dgu, rows, hid, dt, 0);
	down(&s, h, dh, (size_t)rows * hid * 2);
	return end(&s);
}

static int t_attention(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
		       size_t cache_elems, const struct rl_cuda_geom *g, const struct rl_batch *b,
		       uint32_t rows, uint32_t nh, uint32_t hd, uint32_t *n_parts, enum rl_cuda_dtype dt)
{
	struct scope s = { .n = 0 };
	struct rl_cuda_meta m;
	struct rl_cuda_hdr hdr;
	int rc = meta(&s, g, b, rows, &m, &hdr);
	if (rc)
		return end(&s), rc;
	/* a deterministic step may use every partial of the geometry (rl_cuda_host_pack) */
	uint32_t P = b->deterministic ? g->max_parts : rl_cuda_host_parts_cap(g, rows);
	uint16_t *dout = up(&s, out, (size_t)rows * nh * hd * 2);
	uint16_t *dq = up(&s, q, (size_t)rows * nh * hd * 2);
	uint16_t *dk = up(&s, kc, cache_elems * 2), *dv = up(&s, vc, cache_elems * 2);
	float *po = up(&s, NULL, (size_t)(P ? P : 1) * nh * hd * 4), *pml = up(&s, NULL, (size_t)(P ? P : 1) * nh * 8);
	if (!s.failed)
		ok(&s, (cudaError_t)rl_cuda_attention_prepare(hd, dt), "attention shared memory");
	if (!s.failed && b->deterministic)     /* the backend's choice for such a step */
		rl_cuda_attention_det(dout, po, pml, dq, dk, dv, m, rl_cuda_host_items_cap(g, rows), rows, nh,
				      g->n_kv_heads, hd, g->block_size, dt, 0);
	else if (!s.failed)
		rl_cuda_attention(dout, po, pml, dq, dk, dv, m, rl_cuda_host_items_cap(g, rows), rows, nh,
				  g->n_kv_heads, hd, g->block_size, dt, 0);
	down(&s, out, dout, (size_t)rows * nh * hd * 2);
	if (n_parts)
		*n_parts = hdr.n_parts;
	return end(&s);
}

static int t_sample(int32_t *ids, const float *logits, const struct rl_cuda_geom *g,
		    const struct rl_batch *b, uint32_t rows, uint32_t vocab)
{
	struct scope s = { .n = 0 };
	struct rl_cuda_meta m;
	int rc = meta(&s, g, b, rows, &m, NULL);
	if (rc)
		return end(&s), rc;
	uint32_t S = rl_cuda_host_samp_cap(g, rows);
	int32_t *di = up(&s, ids, S * 4);
	float *dl = up(&s, logits, (size_t)S * vocab * 4), *dp = up(&s, NULL, (size_t)S * vocab * 4);
	if (!s.failed)
		rl_cuda_sample(di, dp, dl, m, S, vocab, 0);
	down(&s, ids, di, S * 4);
	return end(&s);
}

#ifdef RL_HAVE_FLASHINFER
/* FlashInfer's own message after one of its calls failed */
static int fi_ok(struct scope *s, int rc, const char *what)
{
	if (rc)
		failf(s, "%s: %s", what, rl_cuda_fi_last_error());
	return !s->failed;
}

static int t_fi_attention(uint16_t *out, const uint16_t *q, const uint16_t *kc, const uint16_t *vc,
			  size_t cache_elems, const struct rl_cuda_geom *g, const struct rl_batch *b,
			  uint32_t rows, uint32_t nh, uint32_t hd, int graph, enum rl_cuda_dtype dt,
			  struct rl_cuda_fi_info *info)
{
	struct scope s = { .n = 0 };
	struct rl_cuda_layout l;
	rl_cuda_host_layout(g, &l);
	void *img = NULL, *ih = NULL;
	uint32_t *samp_seq = malloc(g->max_samp * sizeof *samp_seq);
	int32_t *samp_draft = malloc(g->max_samp * sizeof *samp_draft);
	int32_t *sqo = malloc((rows + 1) * sizeof *sqo), *skv = malloc((rows + 1) * sizeof *skv);
	size_t bytes = 0;
	uint32_t max_pages = 1, nkv = g->n_kv_heads, nreq = 0;
	int mode = RL_CUDA_FI_CSR_NONE;
	for (uint32_t i = 0; i < b->n_seqs; i++)
		if ((b->seqs[i].ctx_len + g->block_size - 1) / g->block_size > max_pages)
			max_pages = (b->seqs[i].ctx_len + g->block_size - 1) / g->block_size;
	struct rl_cuda_fi_ws ws = { 0 };
	if (!samp_seq || !samp_draft || !sqo || !skv)
		failf(&s, "out of host memory");
	else if (ok(&s, cudaMallocHost(&img, l.max_bytes), "cudaMallocHost (step image)")) {
		int rc = rl_cuda_host_pack(g, &l, b, rows, img, &bytes, samp_seq, samp_draft);
		if (rc)
			failf(&s, "packing the step: %s", strerror(-rc));
		else if ((mode = (int)((const struct rl_cuda_hdr *)img)->fi_csr) == RL_CUDA_FI_CSR_NONE)
			failf(&s, "no FlashInfer CSR (sequences out of row order)");
		else
			nreq = ((const struct rl_cuda_hdr *)img)->fi_batch;
	}
	int prefill = mode == RL_CUDA_FI_CSR_PREFILL;
	if (!s.failed && !prefill)
		fi_ok(&s, rl_cuda_fi_decode_sizes(dt, hd, nh, nkv, g->block_size, rows, max_pages, &ws.float_bytes,
						  &ws.int_bytes), "decode workspace sizes");
	if (!s.failed && prefill)
		fi_ok(&s, rl_cuda_fi_prefill_sizes(dt, hd, nh, nkv, g->block_size, rows, nreq, &ws.float_bytes,
						   &ws.int_bytes), "prefill workspace sizes");
	if (s.failed) {
		int rc = strstr(last_err, "row order") ? -EINVAL : -EIO;
		free(samp_seq);
		free(samp_draft);
		free(sqo);
		free(skv);
		cudaFreeHost(img);
		return rc;
	}
	struct rl_cuda_meta m = rl_cuda_host_meta_at(&l, up(&s, img, l.max_bytes));
	ws.float_ws = up(&s, NULL, ws.float_bytes);
	ws.int_ws = up(&s, NULL, ws.int_bytes);
	if (ok(&s, cudaMallocHost(&ih, ws.int_bytes ? ws.int_bytes : 1), "cudaMallocHost (int workspace)"))
		ws.int_host = ih;
	uint16_t *dout = up(&s, out, (size_t)rows * nh * hd * 2);
	uint16_t *dq = up(&s, q, (size_t)rows * nh * hd * 2);
	uint16_t *dk = up(&s, kc, cache_elems * 2), *dv = up(&s, vc, cache_elems * 2);
	if (ws.float_ws)               /* as the backend: zeroed once */
		ok(&s, cudaMemset(ws.float_ws, 0, ws.float_bytes), "cudaMemset (float workspace)");
	/* cudaMemcpy from pageable memory may return before its DMA lands; the stream below is
	 * non-blocking, so nothing else orders its work after those uploads */
	ok(&s, cudaDeviceSynchronize(), "the uploads (cudaDeviceSynchronize)");
	struct rl_cuda_fi_plan plan = { { 0 } }, real = { { 0 } };
	const int32_t *qo = (const int32_t *)((const char *)img + l.fi_qo);
	const int32_t *indptr = (const int32_t *)((const char *)img + l.fi_indptr);
	rl_cuda_host_fi_synth(g, mode, rows, sqo, skv);
	cudaStream_t st = NULL;
	if (!s.failed)
		ok(&s, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	/* eager: planned from the real page index; graph: captured under the synthetic plan */
#define PLAN(pl, what) fi_ok(&s, prefill ? rl_cuda_fi_prefill_plan(dt, hd, nh, nkv, g->block_size, &ws,                \
					graph && (pl) == &plan ? sqo : qo, graph && (pl) == &plan ? skv : indptr, \
					rows, nreq, (pl), st)                                                 \
				   : rl_cuda_fi_decode_plan(dt, hd, nh, nkv, g->block_size, &ws,                    \
					graph && (pl) == &plan ? skv : indptr, rows, 1, (pl), st), what)
	if (!s.failed)
		PLAN(&plan, graph ? "plan (synthetic, for the capture)" : "plan");
	float scale = 1.0f / sqrtf((float)hd);
#define RUN_FI(what) fi_ok(&s, prefill ? rl_cuda_fi_prefill_run(dt, hd, nh, nkv, g->block_size, &ws, &plan, dout, dq, \
						nh * hd, dk, dv, m.fi_qo, m.fi_indptr, m.bt, m.fi_last, nreq, scale, st) \
				       : rl_cuda_fi_decode_run(dt, hd, nh, nkv, g->block_size, &ws, &plan, dout, dq, \
						nh * hd, dk, dv, m.fi_indptr, m.bt, m.fi_last, rows, scale, st), what)
	if (!s.failed && !graph)
		RUN_FI("run");
	if (!s.failed && graph) {
		cudaGraph_t gr = NULL;
		cudaGraphExec_t ge = NULL;
		if (ok(&s, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
			RUN_FI("run (captured)");
			ok(&s, cudaStreamEndCapture(st, &gr), "cudaStreamEndCapture");
		}
		if (!s.failed)
			ok(&s, cudaGraphInstantiate(&ge, gr, 0), "cudaGraphInstantiate");
		/* the backend's step: plan from the real page index, which must equal the captured
		 * plan (the graph's launch geometry), then replay */
		if (!s.failed)
			PLAN(&real, "plan (real page index)");
		if (!s.failed && memcmp(&real, &plan, sizeof plan)) {
			int split = prefill ? RL_CUDA_FI_PPLAN_SPLIT_KV : RL_CUDA_FI_PLAN_SPLIT_KV;
			failf(&s, "the real plan differs from the captured one (padded batch %lld/%lld, split %lld/%lld)",
			      (long long)real.v[RL_CUDA_FI_PLAN_PADDED_BATCH], (long long)plan.v[RL_CUDA_FI_PLAN_PADDED_BATCH],
			      (long long)real.v[split], (long long)plan.v[split]);
			s.failed = 2;
		}
		if (!s.failed)
			ok(&s, cudaGraphLaunch(ge, st), "cudaGraphLaunch");
		if (ge)
			cudaGraphExecDestroy(ge);
		if (gr)
			cudaGraphDestroy(gr);
	}
#undef RUN_FI
#undef PLAN
	if (st) {
		if (!s.failed)
			ok(&s, cudaStreamSynchronize(st), "the FlashInfer kernels (cudaStreamSynchronize)");
		cudaStreamDestroy(st);
	}
	if (info) {
		info->prefill = prefill;
		info->padded_batch = plan.v[RL_CUDA_FI_PLAN_PADDED_BATCH];
		info->split_kv = (int)plan.v[prefill ? RL_CUDA_FI_PPLAN_SPLIT_KV : RL_CUDA_FI_PLAN_SPLIT_KV];
		info->cta_tile_q = prefill ? (int)plan.v[RL_CUDA_FI_PPLAN_CTA_TILE_Q] : 0;
	}
	int mismatch = s.failed == 2;
	down(&s, out, dout, (size_t)rows * nh * hd * 2);
	int rc = end(&s);
	cudaFreeHost(ih);
	cudaFreeHost(img);
	free(samp_seq);
	free(samp_draft);
	free(sqo);
	free(skv);
	return mismatch ? -EPROTO : rc;
}
#endif

static const struct rl_cuda_testapi api = {
	.embed = t_embed, .add_rmsnorm = t_add_rmsnorm, .rope_kv = t_rope_kv, .swiglu = t_swiglu,
	.attention = t_attention, .sample = t_sample, .last_error = t_last_error, .gemm_det = t_gemm_det,
#ifdef RL_HAVE_FLASHINFER
	.fi_attention = t_fi_attention,
#endif
};

EXPORT const struct rl_cuda_testapi *rl_cuda_testapi(void)
{
	return &api;
}
