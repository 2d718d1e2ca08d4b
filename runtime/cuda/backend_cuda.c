/* backend_cuda.c — the cuda backend: bf16 (or fp16) weights on one GPU, cuBLAS for the
 * projections and the LM head, the kernels of kernels/cuda_*.cu for the rest, sampling on the
 * device, and one CUDA graph per padded token-count bucket.
 *
 * A deterministic step (rl_batch.deterministic, issue 51) gives each row the bits it would get
 * alone or in any other step: its GEMMs run rl_cuda_gemm_det (a K order fixed by K, whatever
 * the rows) instead of cuBLAS (whose algorithm and split-K follow the shape), its attention
 * rl_cuda_attention_det (one kernel for every item, keys reduced in fixed chunks merged in
 * order, split only at those chunks) instead of the split-KV path or FlashInfer (whose
 * splits follow the batch), and it replays graphs of its own
 * (graph_det, captured on first use of a bucket). Norms, RoPE, SwiGLU and sampling are
 * already per-row kernels whose launch shape depends on the model only.
 *
 * Weights come from a model file streamed straight to the device (io_uring reads into pinned
 * staging buffers, converted to the storage dtype, copied while the next reads run: see
 * upload_weights), from an fp32 rl_model through the same path, or are made on the device
 * (synthetic shapes). No fp32 copy of a file's model is made in host memory.
 *
 * A step: pack the batch into the pinned metadata image (cuda_host.c), one cudaMemcpyAsync to
 * the fixed device copy, replay the graph of the smallest bucket that holds the step (or run
 * the same launches eagerly when none does), copy the sampled ids back into pinned memory and
 * record an event. launch() returns at once; poll() queries the event; finish() waits on it.
 *
 * One storage dtype, c->wdt (--cuda-dtype: bf16 by default, or fp16), holds the weight
 * matrices, the 2-byte activations and the KV cache; the kernels are instantiated for it and
 * the GEMMs read and write it (CUDA_R_16BF / CUDA_R_16F), always computing in fp32. The
 * residual stream stays fp32 whatever the dtype: it is where real checkpoints' large
 * activations live, beyond fp16's 65504.
 *
 * Device layout (all [rows, ...] buffers sized for max_rows; "wdt" = c->wdt, 2 bytes):
 *   x      [rows, dim] fp32 residual stream     delta [rows, dim] fp32 sublayer output
 *   xb     [rows, dim] wdt normed input          qkv   [rows, qd + 2 kvd] wdt
 *   q, att [rows, qd] wdt                        gu    [rows, 2 hid] wdt (gate | up)
 *   h      [rows, hid] wdt                       xs    [samp, dim] wdt final-normed rows
 *   logits, probs [samp, vocab] fp32             ids   [samp] int32
 *   KV: kc, vc [n_layers][n_blocks][nkv][bs][hd] wdt (the cpu backend's layout)
 * Weights: wqkv [qd + 2 kvd, dim] (q, k, v rows stacked, so one GEMM), wo [dim, qd],
 * wgu [2 hid, dim] (gate, up stacked), wdown [dim, hid], emb/wcls [vocab, dim], all wdt,
 * converted from whatever the file holds (cuda_stage.c); norms and biases fp32.
 * Offsets within the one weight allocation: rl_cuda_stage_layout (runtime/cuda/host/cuda_stage.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include "runtime/backend/rl_backend.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"
#include "runtime/cuda/host/cuda_stage.h"
#include "kernels/rl_cuda_ops.h"
#include "kernels/rl_sample.h"          /* rl_sample_mask_words */
#include "runtime/cuda/rl_cuda_api.h"
#include "runtime/cuda/cuda_internal.h"

#define EXPORT __attribute__((visibility("default")))
#define UP_BUFS 4                      /* pinned staging buffers: reads and copies in flight */
#define UP_BUF_MAX (8u << 20)          /* bytes each (and twice that of conversion room) */
#define UP_BUF_MIN (64u << 10)
#define BLAS_WS_BYTES (32u << 20)      /* cuBLAS workspace, fixed so graph capture allocates nothing */

static int cu_fail(char *err, size_t errlen, const char *what, cudaError_t e)
{
	snprintf(err, errlen, "cuda backend: %s: %s", what, cudaGetErrorString(e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

#define CU(call, what) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	rc = cu_fail(err, errlen, what, e_); goto fail; } } while (0)

int rl_cuda_gemm(struct rl_cuda *c, void *Y, int y_f32, const uint16_t *X, const uint16_t *W,
		 uint32_t rows, uint32_t in, uint32_t out)
{
	/* Row-major Y[rows, out] = X[rows, in] W[out, in]^T is column-major
	 * Y^T[out, rows] = W^T (W read as [in, out] col-major, transposed) x X^T. */
	if (c->det_step) {
		rl_cuda_gemm_det(Y, y_f32, X, W, rows, in, out, c->wdt, c->st);
		return 0;              /* a launch error is caught by rl_cuda_forward's peek */
	}
	const float one = 1.0f, zero = 0.0f;
	cudaDataType_t h = c->wdt == RL_CUDA_FP16 ? CUDA_R_16F : CUDA_R_16BF;
	cublasStatus_t s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)rows, (int)in,
					&one, W, h, (int)in, X, h, (int)in, &zero,
					Y, y_f32 ? CUDA_R_32F : h, (int)out,
					CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	return s == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

/* Enqueues one whole step on c->st for `rows` padded rows (a graph body or an eager step). */
int rl_cuda_forward(struct rl_cuda *c, uint32_t rows)
{
	struct rl_cuda_meta m = c->md;
	uint32_t items = rl_cuda_host_items_cap(&c->g, rows), samp = rl_cuda_host_samp_cap(&c->g, rows);
	uint32_t dim = c->dim, qd = c->qd, kvd = c->kvd, hid = c->hid;
	float eps = c->cfg.norm_eps;
	enum rl_cuda_dtype dt = c->wdt;
	int rc = 0;

	rl_cuda_embed(c->x, c->emb, m, rows, dim, dt, c->st);
	for (uint32_t l = 0; l < c->nl && !rc; l++) {
		const struct rl_cuda_layer *L = &c->L[l];
		uint16_t *kc = c->kc + l * c->layer_kv, *vc = c->vc + l * c->layer_kv;
		/* layer 0: x is the embedding; later: x += the previous layer's down projection */
		rl_cuda_add_rmsnorm(c->xb, c->x, l ? c->delta : NULL, L->attn_norm, NULL, rows, dim, eps, l > 0, dt, c->st);
		rc |= rl_cuda_gemm(c, c->qkv, 0, c->xb, L->wqkv, rows, dim, qd + 2 * kvd);
		rl_cuda_rope_kv(c->q, kc, vc, c->qkv, L->bqkv, c->inv_freq, m, rows, c->nh, c->nkv, c->hd,
				c->g.block_size, c->cfg.rope_scale, c->cfg.rope_halves, L->qknorm, c->cfg.norm_eps, dt, c->st);
		if (c->det_step)
			rl_cuda_attention_det(c->att, c->part_o, c->part_ml, c->q, kc, vc, m, items, rows, c->nh, c->nkv,
					      c->hd, c->g.block_size, dt, c->st);
		else
#ifdef RL_HAVE_FLASHINFER
		if (c->fi_step == RL_CUDA_FI_CSR_DECODE)     /* FlashInfer over the packed CSR */
			rc |= rl_cuda_fi_decode_run(dt, c->hd, c->nh, c->nkv, c->g.block_size, &c->fi_ws, &c->fi_plan,
						    c->att, c->q, c->qd, kc, vc, m.fi_indptr, m.bt, m.fi_last, rows,
						    1.0f / sqrtf((float)c->hd), c->st) ? -EIO : 0;
		else if (c->fi_step == RL_CUDA_FI_CSR_PREFILL)
			rc |= rl_cuda_fi_prefill_run(dt, c->hd, c->nh, c->nkv, c->g.block_size, &c->fi_ws, &c->fi_plan,
						     c->att, c->q, c->qd, kc, vc, m.fi_qo, m.fi_indptr, m.bt, m.fi_last,
						     rl_cuda_host_fi_batch(&c->g, rows), 1.0f / sqrtf((float)c->hd),
						     c->st) ? -EIO : 0;
		else
#endif
		rl_cuda_attention(c->att, c->part_o, c->part_ml, c->q, kc, vc, m, items, rows, c->nh, c->nkv,
				  c->hd, c->g.block_size, dt, c->st);
		rc |= rl_cuda_gemm(c, c->delta, 1, c->att, L->wo, rows, qd, dim);
		rl_cuda_add_rmsnorm(c->xb, c->x, c->delta, L->ffn_norm, NULL, rows, dim, eps, 1, dt, c->st);
		rc |= rl_cuda_gemm(c, c->gu, 0, c->xb, L->wgu, rows, dim, 2 * hid);
		rl_cuda_swiglu(c->h, c->gu, rows, hid, dt, c->st);
		rc |= rl_cuda_gemm(c, c->delta, 1, c->h, L->wdown, rows, hid, dim);
	}
	/* last rows of sampling sequences only: x + delta, final norm, LM head, sampling */
	rl_cuda_add_rmsnorm(c->xs, c->x, c->delta, c->out_norm, m.samp_row, samp, dim, eps, 0, dt, c->st);
	rc |= rl_cuda_gemm(c, c->logits, 1, c->xs, c->wcls, samp, dim, c->vocab);
	rl_cuda_sample(c->ids, c->probs, c->logits, m, samp, c->vocab, c->st);
	if (!rc && cudaPeekAtLastError() != cudaSuccess)
		rc = -EIO;
	return rc;
}

/* ---------------------------------------------------------------- step ------------ */

/* FlashInfer's last error, or "" in a build without it */
static const char *fi_err(void)
{
#ifdef RL_HAVE_FLASHINFER
	return rl_cuda_fi_last_error();
#else
	return "";
#endif
}

/* Records why a step failed (rl_backend_cuda_last_error) and returns rc. */
static int step_fail(struct rl_cuda *c, int rc, const char *what, cudaError_t e)
{
	snprintf(c->err, sizeof c->err, "cuda backend: %s: %s", what,
		 e != cudaSuccess ? cudaGetErrorString(e) : *fi_err() ? fi_err() : strerror(-rc));
	return rc;
}

/* FlashInfer's graph-mode plan of a step padded to `rows` into c->fi_plan, from the CSR the
 * packer wrote into the host image: decode (mode RL_CUDA_FI_CSR_DECODE, one request a row) or
 * prefill (RL_CUDA_FI_CSR_PREFILL, rl_cuda_host_fi_batch requests). */
static int fi_plan(struct rl_cuda *c, int mode, uint32_t rows)
{
#ifdef RL_HAVE_FLASHINFER
	const int32_t *qo = (const int32_t *)((const char *)c->meta_h + c->lay.fi_qo);
	const int32_t *indptr = (const int32_t *)((const char *)c->meta_h + c->lay.fi_indptr);
	if (mode == RL_CUDA_FI_CSR_PREFILL)
		return rl_cuda_fi_prefill_plan(c->wdt, c->hd, c->nh, c->nkv, c->g.block_size, &c->fi_ws, qo, indptr,
					       rows, rl_cuda_host_fi_batch(&c->g, rows), &c->fi_plan, c->st) ? -EIO : 0;
	return rl_cuda_fi_decode_plan(c->wdt, c->hd, c->nh, c->nkv, c->g.block_size, &c->fi_ws, indptr, rows, 1,
				      &c->fi_plan, c->st) ? -EIO : 0;
#else
	(void)c; (void)mode; (void)rows;
	return -ENOSYS;
#endif
}

static int capture(struct rl_cuda *c, uint32_t rows, int fi, cudaGraphExec_t *out, uint32_t *kernels,
		   char *err, size_t errlen);

static int cuda_launch(struct rl_backend *be, const struct rl_batch *b)
{
	struct rl_cuda *c = be->priv;
	if (c->cur)
		return -EBUSY;
	/* with graphs off (a test hook), eager steps still use the bucket's rows, so the two
	 * modes run identical GEMM shapes and must agree bit for bit */
	int bi = rl_cuda_host_pick_bucket(c->buckets, c->n_buckets, b->n_tokens);
	uint32_t rows = bi >= 0 ? c->buckets[bi] : rl_cuda_host_eager_rows(b->n_tokens);
	size_t bytes;
	int rc = rl_cuda_host_pack(&c->g, &c->lay, b, rows, c->meta_h, &bytes, c->samp_seq, c->samp_draft);
	if (rc)
		return step_fail(c, rc, "packing the step", cudaSuccess);
	const struct rl_cuda_hdr *h = c->meta_h;
	c->n_samp = h->n_samp;
	c->n_seqs = b->n_seqs;
	uint32_t samp = rl_cuda_host_samp_cap(&c->g, rows);
	const int det = b->deterministic != 0;
	/* FlashInfer plans on the host from the image's CSR and copies its own int workspace;
	 * never in a deterministic step (its split-KV plan follows the batch) */
	int fi = !c->fi || det ? RL_CUDA_FI_CSR_NONE
		 : h->fi_csr == RL_CUDA_FI_CSR_DECODE && rows > c->fi_rows ? RL_CUDA_FI_CSR_NONE : (int)h->fi_csr;
	if (fi && (rc = fi_plan(c, fi, rows)))
		return step_fail(c, rc, fi == RL_CUDA_FI_CSR_DECODE ? "FlashInfer decode plan" : "FlashInfer prefill plan",
				 cudaSuccess);
	/* a deterministic step's graph: its own key (the same bucket, the batch-invariant
	 * kernels), captured the first time a deterministic step takes the bucket, before this
	 * step's copies are enqueued (the graph reads the metadata at replay, like the others) */
	if (det && bi >= 0 && c->use_graphs && !c->graph_det[bi]) {
		char why[256];
		c->det_step = 1;
		rc = capture(c, rows, RL_CUDA_FI_CSR_NONE, &c->graph_det[bi], &c->graph_det_kernels[bi], why, sizeof why);
		c->det_step = 0;
		if (rc) {
			snprintf(c->err, sizeof c->err, "%s", why);
			return rc;
		}
		c->stats.det_graphs++;
	}
	/* constraint masks (structured output) before the image copy that points at them */
	const uint32_t n_masks = rl_cuda_host_pack_masks(&c->g, &c->lay, b, c->meta_h, c->samp_seq, c->samp_draft,
							 c->masks_h);
	cudaError_t e = n_masks ? cudaMemcpyAsync(c->masks_d, c->masks_h,
						  (size_t)n_masks * rl_sample_mask_words(c->vocab) * sizeof(uint32_t),
						  cudaMemcpyHostToDevice, c->st) : cudaSuccess;
	if (e != cudaSuccess)
		return step_fail(c, -EIO, "constraint mask copy", e);
	e = cudaMemcpyAsync(c->meta_d, c->meta_h, bytes, cudaMemcpyHostToDevice, c->st);
	if (e != cudaSuccess)
		return step_fail(c, -EIO, "step metadata copy", e);
	c->stats.steps++;
	c->stats.det_steps += det;
	if (det) {
		if (bi >= 0 && c->use_graphs) {
			c->stats.graph_steps++;
			c->stats.last_kernels = c->graph_det_kernels[bi];
			if ((e = cudaGraphLaunch(c->graph_det[bi], c->st)) != cudaSuccess)
				return step_fail(c, -EIO, "deterministic graph launch", e);
		} else {
			c->stats.eager_steps++;
			c->stats.last_kernels = 0;
			c->det_step = 1;
			rc = rl_cuda_forward(c, rows);
			c->det_step = 0;
			if (rc)
				return step_fail(c, rc, "eager deterministic step", cudaPeekAtLastError());
		}
	} else if (fi) {
		int dec = fi == RL_CUDA_FI_CSR_DECODE;
		cudaGraphExec_t gx = bi >= 0 && c->use_graphs ? (dec ? c->graph_fi : c->graph_fp)[bi] : NULL;
		if (gx && !memcmp(&c->fi_plan, dec ? &c->fi_graph_plan[bi] : &c->fi_pgraph_plan[bi], sizeof c->fi_plan)) {
			++*(dec ? &c->stats.fi_graph_steps : &c->stats.fi_prefill_graph_steps);
			c->stats.last_kernels = c->graph_kernels[fi][bi];
			if ((e = cudaGraphLaunch(gx, c->st)) != cudaSuccess)
				return step_fail(c, -EIO, dec ? "FlashInfer decode graph launch" : "FlashInfer prefill graph launch", e);
		} else {
			++*(dec ? &c->stats.fi_eager_steps : &c->stats.fi_prefill_eager_steps);
			c->stats.last_kernels = 0;
			c->fi_step = fi;
			rc = rl_cuda_forward(c, rows);
			c->fi_step = 0;
			if (rc)
				return step_fail(c, rc, dec ? "eager FlashInfer decode step" : "eager FlashInfer prefill step",
						 cudaPeekAtLastError());
		}
	} else if (bi >= 0 && c->use_graphs) {
		c->stats.graph_steps++;
		c->stats.last_kernels = c->graph_kernels[RL_CUDA_FI_CSR_NONE][bi];
		if ((e = cudaGraphLaunch(c->graph[bi], c->st)) != cudaSuccess)
			return step_fail(c, -EIO, "graph launch", e);
	} else {
		c->stats.eager_steps++;
		c->stats.last_kernels = 0;
		if ((rc = rl_cuda_forward(c, rows)))
			return step_fail(c, rc, "eager step", cudaPeekAtLastError());
	}
	if ((e = cudaMemcpyAsync(c->ids_h, c->ids, samp * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st)) != cudaSuccess ||
	    (e = cudaEventRecord(c->done, c->st)) != cudaSuccess)
		return step_fail(c, -EIO, "sampled id copy", e);
	c->cur = b;
	c->last_valid = 0;
	return 0;
}

static int cuda_poll(struct rl_backend *be)
{
	struct rl_cuda *c = be->priv;
	if (!c->cur)
		return 1;
	cudaError_t e = cudaEventQuery(c->done);
	return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -EIO;
}

static int cuda_finish(struct rl_backend *be, int32_t *out)
{
	struct rl_cuda *c = be->priv;
	if (!c->cur)
		return -EINVAL;
	const struct rl_batch *b = c->cur;
	c->cur = NULL;
	cudaError_t e = cudaEventSynchronize(c->done);
	if (e != cudaSuccess)           /* a kernel of the step failed: the sticky error says which */
		return step_fail(c, -EIO, "step", e);
	for (uint32_t i = 0; i < c->n_seqs; i++)
		out[i] = -1;
	for (uint32_t j = 0; j < c->n_samp; j++) {
		if (c->samp_draft[j] < 0)
			out[c->samp_seq[j]] = c->ids_h[j];
		else                    /* a verification row (rl_batch.h n_draft) */
			b->seqs[c->samp_seq[j]].draft_out[c->samp_draft[j]] = c->ids_h[j];
	}
	c->last_valid = 1;
	return 0;
}

/* ---------------------------------------------------------------- lifetime -------- */

static void free_all(struct rl_cuda *c)
{
	for (uint32_t i = 0; i < c->n_buckets; i++) {
		if (c->graph[i])
			cudaGraphExecDestroy(c->graph[i]);
		if (c->graph_fi[i])
			cudaGraphExecDestroy(c->graph_fi[i]);
		if (c->graph_fp[i])
			cudaGraphExecDestroy(c->graph_fp[i]);
		if (c->graph_det[i])
			cudaGraphExecDestroy(c->graph_det[i]);
	}
	if (c->fi_ws.int_host)
		cudaFreeHost(c->fi_ws.int_host);
	void *dev[] = { c->weights, c->kc, c->vc, c->act, c->meta_d, c->masks_d, c->blas_ws, c->fi_ws.float_ws,
			c->fi_ws.int_ws };
	for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
		if (dev[i])
			cudaFree(dev[i]);
	if (c->meta_h)
		cudaFreeHost(c->meta_h);
	if (c->ids_h)
		cudaFreeHost(c->ids_h);
	if (c->masks_h)
		cudaFreeHost(c->masks_h);
	if (c->done)
		cudaEventDestroy(c->done);
	if (c->blas)
		cublasDestroy(c->blas);
	if (c->st)
		cudaStreamDestroy(c->st);
	free(c->L);
	free(c->samp_seq);
	free(c->samp_draft);
	free(c->vocab_blob);
	free(c);
}

static void cuda_destroy(struct rl_backend *be)
{
	struct rl_cuda *c = be->priv;
	if (c->cur)
		cudaEventSynchronize(c->done);
	free_all(c);
}

static const struct rl_backend_ops cuda_ops = {
	.launch = cuda_launch, .poll = cuda_poll, .finish = cuda_finish, .destroy = cuda_destroy,
};

EXPORT int rl_backend_cuda_logits(struct rl_backend *be, uint32_t seq_index, float *out)
{
	struct rl_cuda *c = be->priv;
	if (be->ops != &cuda_ops || !c->last_valid || seq_index >= c->n_seqs)
		return -ENOENT;
	for (uint32_t j = 0; j < c->n_samp; j++)
		if (c->samp_seq[j] == seq_index && c->samp_draft[j] < 0)
			return cudaMemcpy(out, c->logits + (size_t)j * c->vocab, c->vocab * sizeof(float),
					  cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -EIO;
	return -ENOENT;
}

EXPORT int rl_backend_cuda_set_graphs(struct rl_backend *be, int on)
{
	struct rl_cuda *c = be->priv;
	if (be->ops != &cuda_ops)
		return -EINVAL;
	c->use_graphs = on && c->n_buckets > 0;
	return 0;
}

EXPORT int rl_backend_cuda_stats(struct rl_backend *be, struct rl_cuda_stats *out)
{
	if (be->ops != &cuda_ops)
		return -EINVAL;
	*out = ((struct rl_cuda *)be->priv)->stats;
	return 0;
}

EXPORT const char *rl_backend_cuda_last_error(struct rl_backend *be)
{
	return be->ops == &cuda_ops ? ((struct rl_cuda *)be->priv)->err : "not a cuda backend";
}

#ifdef RL_HAVE_FLASHINFER
EXPORT const char *rl_cuda_flashinfer_version(void)
{
	return RL_CUDA_FI_VERSION;
}
#endif

EXPORT int rl_cuda_device_check(char *why, size_t n)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		snprintf(why, n, "no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
		return -ENODEV;
	}
	if (count == 0) {
		snprintf(why, n, "no CUDA device found (cudaGetDeviceCount: 0 devices)");
		return -ENODEV;
	}
	return 0;
}

/* The upload's sink. cuda_stage.c maps each streamed chunk to its place in c->weights and
 * converts it (into conv[buf]) unless its bytes can go as they are (from raw[buf]); the copies
 * go on c->st, and an event recorded after a buffer's last copy gates its reuse: the reader
 * refills raw[buf] (and the stager rewrites conv[buf]) only once that event has completed. */
struct upload {
	struct rl_cuda *c;
	struct rl_cuda_stager st;
	void *raw[UP_BUFS], *conv[UP_BUFS];
	cudaEvent_t ev[UP_BUFS];
};

static int up_copy(void *ctx, size_t dst, const void *src, size_t n, char *err, size_t errlen)
{
	struct upload *u = ctx;
	cudaError_t e = cudaMemcpyAsync((char *)u->c->weights + dst, src, n, cudaMemcpyHostToDevice, u->c->st);
	return e == cudaSuccess ? 0 : cu_fail(err, errlen, "weight upload", e);
}

static int up_seal(void *ctx, int buf, char *err, size_t errlen)
{
	struct upload *u = ctx;
	cudaError_t e = cudaEventRecord(u->ev[buf], u->c->st);
	return e == cudaSuccess ? 0 : cu_fail(err, errlen, "weight upload event", e);
}

static int up_chunk(void *ctx, const struct rl_model_chunk *ch, char *err, size_t errlen)
{
	struct upload *u = ctx;
	return rl_cuda_stage_chunk(&u->st, ch, err, errlen);
}

static int up_ready(void *ctx, int buf, int wait, char *err, size_t errlen)
{
	struct upload *u = ctx;
	cudaError_t e = wait ? cudaEventSynchronize(u->ev[buf]) : cudaEventQuery(u->ev[buf]);
	if (e == cudaErrorNotReady && !wait)
		return 0;
	return e == cudaSuccess ? 1 : cu_fail(err, errlen, "weight upload", e);
}

/* Streams the weights of plan (a model file) or else of m (fp32 in memory) into c->weights. */
static int upload_weights(struct rl_cuda *c, const struct rl_model_plan *plan, const struct rl_model *m,
			  char *err, size_t errlen)
{
	struct upload u = { .c = c };
	int rc = rl_cuda_stage_init(&u.st, &c->cfg, c->wdt);
	if (rc) {
		snprintf(err, errlen, "cuda backend: out of memory");
		return rc;
	}
	/* a quarter of the model per buffer, so a small model does not pin 100 MiB */
	uint64_t total = 0;
	if (plan)
		for (size_t i = 0; i < plan->n_reads; i++)
			total += plan->reads[i].nbytes;
	else
		total = rl_model_weight_elems(&c->cfg) * sizeof(float);
	size_t bb = total / UP_BUFS > UP_BUF_MAX ? UP_BUF_MAX : total / UP_BUFS < UP_BUF_MIN ? UP_BUF_MIN : total / UP_BUFS;
	bb = (bb + 4095) & ~(size_t)4095;
	for (int b = 0; b < UP_BUFS; b++) {
		CU(cudaMallocHost(&u.raw[b], bb), "pinned staging buffer");
		CU(cudaMallocHost(&u.conv[b], 2 * bb), "pinned staging buffer");
		CU(cudaEventCreateWithFlags(&u.ev[b], cudaEventDisableTiming), "event");
	}
	u.st.conv = u.conv;
	u.st.conv_bytes = 2 * bb;      /* fp32 norms from a 2-byte file double in size */
	u.st.copy = up_copy;
	u.st.seal = up_seal;
	u.st.ctx = &u;
	struct rl_model_sink sink = { .ctx = &u, .chunk = up_chunk, .buf_ready = up_ready };
	struct rl_model_stream_opts o = { .bufs = u.raw, .n_bufs = UP_BUFS, .buf_bytes = bb,
					  .max_elems = rl_cuda_stage_max_elems(2 * bb) };
	rc = plan ? rl_model_stream(plan, &o, &sink, err, errlen) : rl_model_stream_fp32(m, &o, &sink, err, errlen);
	if (!rc)
		CU(cudaStreamSynchronize(c->st), "weight upload");
fail:
	/* after an error copies may still be reading the buffers: let them finish first */
	cudaStreamSynchronize(c->st);
	for (int b = 0; b < UP_BUFS; b++) {
		if (u.ev[b])
			cudaEventDestroy(u.ev[b]);
		if (u.raw[b])
			cudaFreeHost(u.raw[b]);
		if (u.conv[b])
			cudaFreeHost(u.conv[b]);
	}
	rl_cuda_stage_free(&u.st);
	return rc;
}

/* Random weights on the device with rl_model_fill_random's scales (not its values), in c->wdt
 * (the same draws for either dtype, rounded to it). */
static int fill_synthetic(struct rl_cuda *c, char *err, size_t errlen)
{
	int rc = 0;
	size_t d = c->dim;
	float sd = sqrtf(3.0f / d), sq = sqrtf(3.0f / c->qd), sh = sqrtf(3.0f / c->hid);
	uint64_t seed = 1;
	enum rl_cuda_dtype dt = c->wdt;
	rl_cuda_fill_uniform(c->emb, (size_t)c->vocab * d, 1.0f, 0.0f, seed++, dt, c->st);
	if (c->wcls != c->emb)
		rl_cuda_fill_uniform(c->wcls, (size_t)c->vocab * d, sd, 0.0f, seed++, dt, c->st);
	rl_cuda_fill_uniform_f32(c->out_norm, d, 0.1f, 1.0f, seed++, c->st);
	for (uint32_t l = 0; l < c->nl; l++) {
		struct rl_cuda_layer *L = &c->L[l];
		rl_cuda_fill_uniform(L->wqkv, (size_t)(c->qd + 2 * c->kvd) * d, sd, 0.0f, seed++, dt, c->st);
		rl_cuda_fill_uniform(L->wo, d * c->qd, sq, 0.0f, seed++, dt, c->st);
		rl_cuda_fill_uniform(L->wgu, 2 * (size_t)c->hid * d, sd, 0.0f, seed++, dt, c->st);
		rl_cuda_fill_uniform(L->wdown, d * c->hid, sh, 0.0f, seed++, dt, c->st);
		rl_cuda_fill_uniform_f32(L->attn_norm, d, 0.1f, 1.0f, seed++, c->st);
		rl_cuda_fill_uniform_f32(L->ffn_norm, d, 0.1f, 1.0f, seed++, c->st);
		if (L->qknorm)
			rl_cuda_fill_uniform_f32(L->qknorm, 2 * (size_t)c->hd, 0.3f, 1.0f, seed++, c->st);
	}
	CU(cudaGetLastError(), "random weights");
	CU(cudaStreamSynchronize(c->st), "random weights");
fail:
	return rc;
}

/* Points the weight fields into the one allocation at base (rl_cuda_stage_layout, which the
 * upload writes by); returns its size. */
static size_t place_weights(struct rl_cuda *c, char *base)
{
	struct rl_cuda_wlayout w;
	rl_cuda_stage_layout(&c->cfg, &w);
	if (!base)
		return w.bytes;
	c->emb = (uint16_t *)(base + w.emb);
	c->wcls = (uint16_t *)(base + w.wcls);
	c->out_norm = (float *)(base + w.out_norm);
	c->inv_freq = (float *)(base + w.inv_freq);
	for (uint32_t l = 0; l < c->nl; l++) {
		struct rl_cuda_layer *L = &c->L[l];
		char *lb = base + (size_t)l * w.layer_stride;
		L->wqkv = (uint16_t *)(lb + w.wqkv);
		L->wo = (uint16_t *)(lb + w.wo);
		L->wgu = (uint16_t *)(lb + w.wgu);
		L->wdown = (uint16_t *)(lb + w.wdown);
		L->attn_norm = (float *)(lb + w.attn_norm);
		L->ffn_norm = (float *)(lb + w.ffn_norm);
		L->bqkv = c->cfg.has_qkv_bias ? (float *)(lb + w.bqkv) : NULL;
		L->qknorm = c->cfg.has_qk_norm ? (float *)(lb + w.qknorm) : NULL;
	}
	return w.bytes;
}

/* Carves [n] elements of `size` bytes out of *p (256-byte aligned). */
static void *carve(char **p, size_t n, size_t size)
{
	void *r = *p;
	*p += (n * size + 255) & ~(size_t)255;
	return r;
}

/* Sizes (carve_into 0, base NULL) or places (carve_into 1) the buffers in one allocation. */
#define C(field, n, sz) do { void *q_ = carve(&p, n, sz); if (carve_into) field = q_; } while (0)
static size_t act_bytes(struct rl_cuda *c, int carve_into, char *base)
{
	char *p = base;
	size_t R = c->g.max_rows, S = c->g.max_samp, P = c->g.max_parts;
	C(c->x, R * c->dim, 4);
	C(c->delta, R * c->dim, 4);
	/* the 2-byte buffers hold c->wdt */
	C(c->xb, R * c->dim, 2);
	C(c->qkv, R * (c->qd + 2 * c->kvd), 2);
	C(c->q, R * c->qd, 2);
	C(c->att, R * c->qd, 2);
	C(c->gu, R * 2 * c->hid, 2);
	C(c->h, R * c->hid, 2);
	C(c->xs, S * c->dim, 2);
	C(c->logits, S * c->vocab, 4);
	C(c->probs, S * c->vocab, 4);
	C(c->part_o, P * c->nh * c->hd, 4);
	C(c->part_ml, P * c->nh * 2, 4);
	C(c->ids, S, 4);
#undef C
	return (size_t)(p - base);
}

/* Kernel nodes of a captured graph (cuBLAS's kernels are nodes of it too). */
static uint32_t graph_kernels(cudaGraph_t gr)
{
	size_t n = 0, k = 0;
	if (cudaGraphGetNodes(gr, NULL, &n) != cudaSuccess || !n)
		return 0;
	cudaGraphNode_t *nodes = malloc(n * sizeof *nodes);
	if (nodes && cudaGraphGetNodes(gr, nodes, &n) == cudaSuccess)
		for (size_t i = 0; i < n; i++) {
			enum cudaGraphNodeType t;
			k += cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
		}
	free(nodes);
	return (uint32_t)k;
}

/* Captures the step for `rows` padded rows (fi: with FlashInfer's attention of that
 * RL_CUDA_FI_CSR_* mode under c->fi_plan), instantiates it into *out and counts its kernels
 * into *kernels. */
static int capture(struct rl_cuda *c, uint32_t rows, int fi, cudaGraphExec_t *out, uint32_t *kernels,
		   char *err, size_t errlen)
{
	cudaGraph_t gr;
	cudaError_t e = cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal);
	if (e != cudaSuccess)
		return cu_fail(err, errlen, "graph capture", e);
	c->fi_step = fi;
	int frc = rl_cuda_forward(c, rows);
	c->fi_step = 0;
	e = cudaStreamEndCapture(c->st, &gr);
	if (frc || e != cudaSuccess) {
		snprintf(err, errlen, "cuda backend: capturing the %sgraph for %u rows failed (%s)",
			 c->det_step ? "deterministic " : fi == RL_CUDA_FI_CSR_DECODE ? "FlashInfer decode " :
			 fi ? "FlashInfer prefill " : "", rows,
			 e != cudaSuccess ? cudaGetErrorString(e) : fi && *fi_err() ? fi_err() :
			 cudaGetErrorString(cudaGetLastError()));
		if (e == cudaSuccess)
			cudaGraphDestroy(gr);
		return -EIO;
	}
	*kernels = graph_kernels(gr);
	e = cudaGraphInstantiate(out, gr, 0);
	cudaGraphDestroy(gr);
	return e == cudaSuccess ? 0 : cu_fail(err, errlen, "graph instantiation", e);
}

/* --cuda-attn flashinfer: checks the shape, sizes and allocates FlashInfer's workspaces for
 * every step the backend can see: decode up to max_seqs sequences and prefill up to max_rows
 * rows, padded as launch pads. */
static int fi_setup(struct rl_cuda *c, const struct rl_backend_params *p, char *err, size_t errlen)
{
#ifndef RL_HAVE_FLASHINFER
	(void)c; (void)p;
	snprintf(err, errlen, "--cuda-attn flashinfer: this librlcuda.so was built without FlashInfer "
		 "(run .ci/flashinfer, which fetches its headers, then make); or use --cuda-attn ringlm");
	return -ENOTSUP;
#else
	if (!rl_cuda_fi_supported(c->wdt, c->hd, c->nh, c->nkv)) {
		rl_cuda_fi_decode_sizes(c->wdt, c->hd, c->nh, c->nkv, c->g.block_size, 1, 1, NULL, NULL);
		snprintf(err, errlen, "--cuda-attn %s", rl_cuda_fi_last_error());
		return -EINVAL;
	}
	int bi = rl_cuda_host_pick_bucket(c->buckets, c->n_buckets, c->g.max_seqs);
	c->fi_rows = bi >= 0 ? c->buckets[bi] : rl_cuda_host_eager_rows(c->g.max_seqs);
	if (c->fi_rows > c->g.max_rows)
		c->fi_rows = c->g.max_rows;
	uint32_t max_pages = (c->cfg.max_ctx + c->g.block_size - 1) / c->g.block_size;
	size_t fb = 0, ib = 0;
	/* every padded row count a step can have (the buckets, the eager multiples up to max_rows):
	 * decode plans up to fi_rows, prefill plans over rl_cuda_host_fi_batch requests; one
	 * workspace serves both, since a step plans into it before it runs */
	for (uint32_t r = 1; r <= c->g.max_rows; r++) {
		int is_bucket = 0;
		for (uint32_t i = 0; i < c->n_buckets; i++)
			is_bucket |= c->buckets[i] == r;
		if (!is_bucket && r % RL_CUDA_ROW_ALIGN && r != c->fi_rows)
			continue;
		size_t f = 0, n = 0, pf = 0, pn = 0;
		if ((r <= c->fi_rows &&
		     rl_cuda_fi_decode_sizes(c->wdt, c->hd, c->nh, c->nkv, c->g.block_size, r, max_pages, &f, &n)) ||
		    rl_cuda_fi_prefill_sizes(c->wdt, c->hd, c->nh, c->nkv, c->g.block_size, r,
					     rl_cuda_host_fi_batch(&c->g, r), &pf, &pn)) {
			snprintf(err, errlen, "--cuda-attn flashinfer: %s", rl_cuda_fi_last_error());
			return -EIO;
		}
		fb = f > fb ? f : fb;
		fb = pf > fb ? pf : fb;
		ib = n > ib ? n : ib;
		ib = pn > ib ? pn : ib;
	}
	c->fi_ws.float_bytes = fb ? fb : 16;
	c->fi_ws.int_bytes = ib ? ib : 16;
	if (cudaMalloc(&c->fi_ws.float_ws, c->fi_ws.float_bytes) != cudaSuccess ||
	    cudaMalloc(&c->fi_ws.int_ws, c->fi_ws.int_bytes) != cudaSuccess ||
	    cudaMallocHost(&c->fi_ws.int_host, c->fi_ws.int_bytes) != cudaSuccess) {
		snprintf(err, errlen, "cuda backend: cannot allocate FlashInfer's workspaces (%zu + %zu bytes)",
			 c->fi_ws.float_bytes, c->fi_ws.int_bytes);
		return -ENOMEM;
	}
	/* zeroed once, so no read of it meets uninitialised memory: graph-mode plans launch
	 * padded work items (the valid mask skips them) and a padding row (no keys) must come
	 * out finite, since the wo GEMM reads every padded row; test_fi_decode checks it */
	cudaError_t e = cudaMemsetAsync(c->fi_ws.float_ws, 0, c->fi_ws.float_bytes, c->st);
	if (e != cudaSuccess)
		return cu_fail(err, errlen, "FlashInfer float workspace", e);
	c->fi = 1;
	return 0;
#endif
}

/* The backend over exactly one of: m (fp32), plan (a model file to stream), a synthetic shape. */
static int create(const struct rl_model *m, struct rl_model_plan *plan, const char *synthetic_shape,
		  const struct rl_backend_params *p, struct rl_backend **out, char *err, size_t errlen)
{
	struct rl_model_config cfg;
	if (synthetic_shape) {
		if (rl_model_shape(synthetic_shape, &cfg)) {
			snprintf(err, errlen, "unknown synthetic shape '%s' (try tiny, 110m, 1b, llama3-8b)", synthetic_shape);
			return -EINVAL;
		}
	} else if (m) {
		cfg = m->cfg;
	} else if (plan) {
		cfg = plan->cfg;
	} else {
		snprintf(err, errlen, "cuda backend: no model");
		return -EINVAL;
	}
	if (!p->n_kv_blocks || !p->block_size || !p->max_batch_tokens || !p->max_seqs) {
		snprintf(err, errlen, "cuda backend: --kv-blocks, --block-size, --max-batch-tokens and max seqs must be positive");
		return -EINVAL;
	}
	if (cfg.n_experts) {
		snprintf(err, errlen, "--backend cuda: mixture-of-experts models (%u experts) are not in the cuda backend yet; use --backend cpu",
			 cfg.n_experts);
		return -ENOTSUP;
	}
	if (cfg.rope_dims && cfg.rope_dims != cfg.head_dim) {
		snprintf(err, errlen, "--backend cuda: partial RoPE (%u of %u dims) is not in the cuda backend yet; use --backend cpu",
			 cfg.rope_dims, cfg.head_dim);
		return -ENOTSUP;
	}
	if (cfg.rope_orig_ctx) {
		snprintf(err, errlen, "--backend cuda: LongRoPE (Phi-3 128k) is not in the cuda backend yet; use --backend cpu");
		return -ENOTSUP;
	}
	if (cfg.post_norms || cfg.ffn_gelu || cfg.sliding_window || cfg.emb_scale > 0 || cfg.attn_scale > 0) {
		snprintf(err, errlen, "--backend cuda: Gemma 3 (post-norms, GELU, sliding-window attention) is not in the cuda "
			 "backend yet; use --backend cpu");
		return -ENOTSUP;
	}
	if (cfg.has_qk_norm && cfg.n_heads + cfg.n_kv_heads > RL_CUDA_QK_NORM_HEADS) {
		snprintf(err, errlen, "--backend cuda: per-head q/k norms over %u heads (at most %u)", cfg.n_heads + cfg.n_kv_heads,
			 RL_CUDA_QK_NORM_HEADS);
		return -ENOTSUP;
	}
	uint32_t group = cfg.n_kv_heads ? cfg.n_heads / cfg.n_kv_heads : 0;
	if (!group || group > 8 || cfg.head_dim % 2 || cfg.head_dim > 256) {
		snprintf(err, errlen, "cuda backend: unsupported shape (heads %u per kv head, head_dim %u; needs <= 8 and even <= 256)",
			 group, cfg.head_dim);
		return -EINVAL;
	}
	struct rl_cuda *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	int rc = 0;
	if (p->max_ctx)                /* --ctx: the context served, not the one trained */
		cfg.max_ctx = p->max_ctx;
	c->cfg = cfg;
	c->wdt = (enum rl_cuda_dtype)p->cuda_dtype;
	c->dim = cfg.dim; c->hd = cfg.head_dim; c->hid = cfg.hidden_dim; c->vocab = cfg.vocab_size;
	c->nl = cfg.n_layers; c->nh = cfg.n_heads; c->nkv = cfg.n_kv_heads;
	c->qd = c->nh * c->hd; c->kvd = c->nkv * c->hd;
	c->L = calloc(c->nl, sizeof *c->L);
	c->samp_seq = calloc((size_t)p->max_seqs + p->max_draft_rows, sizeof *c->samp_seq);
	c->samp_draft = calloc((size_t)p->max_seqs + p->max_draft_rows, sizeof *c->samp_draft);
	if (!c->L || !c->samp_seq || !c->samp_draft) {
		free_all(c);
		return -ENOMEM;
	}
	struct cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, 0), "device properties");
	rl_cuda_host_geom(&c->g, p->max_batch_tokens, p->max_seqs, p->n_kv_blocks, p->block_size,
			  cfg.max_ctx, c->nh, c->nkv, c->vocab, 2u * (uint32_t)prop.multiProcessorCount);
	c->g.max_samp += p->max_draft_rows;        /* LM head and sampler rows for verification */
	rl_cuda_host_layout(&c->g, &c->lay);
	if ((rc = rl_cuda_host_parse_buckets(p->cuda_graph_buckets, c->g.max_rows, c->buckets, &c->n_buckets, err, errlen))) {
		free_all(c);
		return rc;
	}
	CU(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking), "stream");
	CU((cudaError_t)rl_cuda_attention_prepare(c->hd, (enum rl_cuda_dtype)c->wdt), "attention shared memory");
	CU(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), "event");
	if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cuda backend: cublasCreate failed");
		rc = -EIO;
		goto fail;
	}
	CU(cudaMalloc(&c->blas_ws, BLAS_WS_BYTES), "cuBLAS workspace");
	if (cublasSetStream(c->blas, c->st) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cuda backend: cuBLAS set-up failed");
		rc = -EIO;
		goto fail;
	}

	size_t wb = place_weights(c, NULL);
	rc = cudaMalloc(&c->weights, wb) == cudaSuccess ? 0 : -ENOMEM;
	if (rc) {
		snprintf(err, errlen, "cuda backend: cannot allocate %.1f GiB of %s weights", wb / 1073741824.0,
			 c->wdt == RL_CUDA_FP16 ? "fp16" : "bf16");
		goto fail;
	}
	place_weights(c, c->weights);
	c->layer_kv = (size_t)c->g.n_kv_blocks * c->g.block_size * c->kvd;
	size_t kvb = c->layer_kv * c->nl * sizeof(uint16_t);
	if (cudaMalloc((void **)&c->kc, kvb) != cudaSuccess || cudaMalloc((void **)&c->vc, kvb) != cudaSuccess) {
		snprintf(err, errlen, "cuda backend: cannot allocate %.1f GiB of KV cache; lower --kv-blocks", 2.0 * kvb / 1073741824.0);
		rc = -ENOMEM;
		goto fail;
	}
	/* zeroed so a read of a slot no step wrote (a malformed batch) is finite and repeatable:
	 * all-zero bytes are +0.0 in bf16 and fp16 alike */
	CU(cudaMemsetAsync(c->kc, 0, kvb, c->st), "KV cache");
	CU(cudaMemsetAsync(c->vc, 0, kvb, c->st), "KV cache");
	size_t ab = act_bytes(c, 0, NULL);
	CU(cudaMalloc(&c->act, ab), "activation buffers");
	act_bytes(c, 1, c->act);
	/* attention writes only live rows: zeroed once so padding rows stay finite forever */
	CU(cudaMemsetAsync(c->act, 0, ab, c->st), "activation buffers");
	CU(cudaMalloc(&c->meta_d, c->lay.max_bytes), "metadata buffer");
	CU(cudaMallocHost(&c->meta_h, c->lay.max_bytes), "pinned metadata buffer");
	CU(cudaMallocHost((void **)&c->ids_h, c->g.max_samp * sizeof(int32_t)), "pinned id buffer");
	const size_t mask_bytes = (size_t)c->g.max_samp * rl_sample_mask_words(c->vocab) * sizeof(uint32_t);
	CU(cudaMalloc((void **)&c->masks_d, mask_bytes), "constraint mask buffer");
	CU(cudaMallocHost((void **)&c->masks_h, mask_bytes), "pinned constraint mask buffer");
	c->md = rl_cuda_host_meta_at(&c->lay, c->meta_d);
	c->md.masks = c->masks_d;

	float *inv = malloc(c->hd / 2 * sizeof(float));
	if (!inv) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < c->hd / 2; i++)
		inv[i] = rl_rope_inv_freq(&cfg, 0, i);   /* LongRoPE is refused above */
	cudaError_t e = cudaMemcpy(c->inv_freq, inv, c->hd / 2 * sizeof(float), cudaMemcpyHostToDevice);
	free(inv);
	CU(e, "RoPE table");
	if ((rc = m || plan ? upload_weights(c, plan, m, err, errlen) : fill_synthetic(c, err, errlen)))
		goto fail;

	/* one graph per bucket; the metadata is read at replay, so nothing here is step-specific */
	for (uint32_t i = 0; i < c->n_buckets; i++)
		if ((rc = capture(c, c->buckets[i], RL_CUDA_FI_CSR_NONE, &c->graph[i],
				  &c->graph_kernels[RL_CUDA_FI_CSR_NONE][i], err, errlen)))
			goto fail;
	/* FlashInfer: two more graphs for each bucket, captured under a plan of its counts (a
	 * graph-mode plan's launch depends on those only): decode for the buckets a decode-only
	 * step can take, planned over one block a request; prefill for every bucket, planned as if
	 * one request had all the rows but one for each other request */
	if (p->cuda_attn && (rc = fi_setup(c, p, err, errlen)))
		goto fail;
	for (uint32_t i = 0; c->fi && i < c->n_buckets; i++) {
		uint32_t rows = c->buckets[i];
		int32_t *qo = (int32_t *)((char *)c->meta_h + c->lay.fi_qo);
		int32_t *indptr = (int32_t *)((char *)c->meta_h + c->lay.fi_indptr);
		for (int mode = RL_CUDA_FI_CSR_DECODE; mode <= RL_CUDA_FI_CSR_PREFILL; mode++) {
			int dec = mode == RL_CUDA_FI_CSR_DECODE;
			if (dec && rows > c->fi_rows)
				continue;
			rl_cuda_host_fi_synth(&c->g, mode, rows, qo, indptr);
			if ((rc = fi_plan(c, mode, rows))) {
				snprintf(err, errlen, "cuda backend: %s", fi_err());
				goto fail;
			}
			*(dec ? &c->fi_graph_plan[i] : &c->fi_pgraph_plan[i]) = c->fi_plan;
			if ((rc = capture(c, rows, mode, dec ? &c->graph_fi[i] : &c->graph_fp[i],
					  &c->graph_kernels[mode][i], err, errlen)))
				goto fail;
		}
	}
	c->use_graphs = c->n_buckets > 0;
	CU(cudaStreamSynchronize(c->st), "set-up");

	c->be.ops = &cuda_ops;
	c->be.priv = c;
	snprintf(c->be.info.name, sizeof c->be.info.name, "cuda");
	if (m || plan) {
		snprintf(c->be.info.model_name, sizeof c->be.info.model_name, "%s", m ? m->name : plan->name);
		snprintf(c->be.info.chat_template, sizeof c->be.info.chat_template, "%s",
			 m ? m->chat_template : plan->chat_template);
		snprintf(c->be.info.chat_system, sizeof c->be.info.chat_system, "%s",
			 m ? m->chat_system : plan->chat_system);
	}
	else {
		snprintf(c->be.info.model_name, sizeof c->be.info.model_name, "synthetic:%s", synthetic_shape);
	}
	if (plan) {                    /* the backend keeps the vocabulary its info points to */
		c->vocab_blob = plan->vocab_blob;
		c->vocab_blob_size = plan->vocab_blob_size;
		plan->vocab_blob = NULL;
		plan->vocab_blob_size = 0;
	}
	c->be.info.vocab_size = c->vocab;
	c->be.info.max_ctx = cfg.max_ctx;
	c->be.info.bos_id = cfg.bos_id;
	c->be.info.eos_id = cfg.eos_id;
	c->be.info.max_draft_rows = p->max_draft_rows;
	c->be.info.deterministic = 1;          /* rl_cuda_gemm_det, rl_cuda_attention_det, their own graphs */
	c->be.info.vocab_blob = m ? m->vocab_blob : c->vocab_blob;
	c->be.info.vocab_blob_size = m ? m->vocab_blob_size : c->vocab_blob_size;
	*out = &c->be;
	return 0;
fail:
	if (c->st)
		cudaStreamSynchronize(c->st);
	free_all(c);
	return rc ? rc : -EIO;
}

EXPORT int rl_backend_cuda_create(const struct rl_model *m, const char *synthetic_shape,
				  const struct rl_backend_params *p, struct rl_backend **out,
				  char *err, size_t errlen)
{
	char why[256];
	if (p->cuda_dtype != RL_CUDA_BF16 && p->cuda_dtype != RL_CUDA_FP16) {
		snprintf(err, errlen, "cuda backend: weight dtype %d unknown (0 bf16, 1 fp16)", p->cuda_dtype);
		return -EINVAL;
	}
	if (rl_cuda_device_check(why, sizeof why)) {
		snprintf(err, errlen, "--backend cuda: %s", why);
		return -ENODEV;
	}
	if (m || synthetic_shape || !p->model_path)
		return create(m, NULL, synthetic_shape, p, out, err, errlen);
	struct rl_model_plan plan;
	int rc = rl_model_plan_open(p->model_path, p->tokenizer_path, &plan, err, errlen);
	if (rc)
		return rc;
	rc = create(NULL, &plan, NULL, p, out, err, errlen);
	rl_model_plan_close(&plan);
	return rc;
}
