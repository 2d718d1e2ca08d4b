/* rl_backend_cpu.c — the cpu backend: the Llama forward (fp32 activations) over a mixed batch (prefill chunks
 * and decode rows) with a paged KV cache, on a persistent pool of worker threads.
 *
 * launch() validates the batch and wakes the pool; every participant runs forward() below,
 * splitting each phase and meeting at barriers. Participant 0 is the thread that calls
 * finish() (the runtime thread): on a machine with few cores a thread that only waited would
 * take a core from the workers, so it computes its share instead (info.finish_works tells the
 * runtime to call finish() right after launch). `threads` counts every participant, the
 * caller included; the pool holds threads - 1 background workers.
 * Idle workers and barrier waiters spin briefly, then sleep on a futex, so a step costs no
 * syscall when work is flowing and no CPU when it is not.
 *
 * KV pool layout: [n_layers][n_kv_blocks][n_kv_heads][block_size][head_dim] for K and for V,
 * so one (layer, block, kv head) is a contiguous [block_size, head_dim] tile for attention.
 * Activations are sized by max_batch_tokens; the final norm and LM head run only on the rows
 * that sample (each sampling sequence's last, and the draft rows a verifying one adds),
 * max_seqs rows at a time. Matrices are read as the model
 * stores them (struct rl_wmat: fp32, or a file's F16/BF16/Q8_0/Q4_K... bytes kept as they
 * are by rl_model_load_stored), through rl_cpu_qmatmul.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "kernels/cpu_ops.h"
#include "runtime/backend/rl_backend.h"
#include "ipc/rl_clock.h"
#include "kernels/rl_model.h"
#include "kernels/rl_sample.h"

#define MIN_FLOPS_PER_WORKER 4000000u  /* default min_work: ~40 µs of matmul, >> a barrier */
/* A few-row step is bound by the weight bytes it streams, not its FLOPs: min_work / this many
 * bytes of a layer's weights (256 KiB at the default, ~20 µs at 13 GB/s) also justify a worker */
#define FLOPS_PER_WORKER_BYTE 16u
#define SPIN_PAUSES 1000               /* pure spinning first: a barrier usually opens within µs */
#define SPIN_YIELD_NS 200000           /* then yield (lets an oversubscribed peer run) up to this */

/* Steps of at most this many rows have every worker norm all of them into a buffer of its own
 * (norm_rows) */
#define OWN_ROWS 16

/* One piece of a step's attention: KV heads [kh, kh + n_kv) of batch sequence seq, for its
 * query rows [r0, r1) */
struct att_item {
	uint32_t seq, kh, n_kv, r0, r1;
};

struct cpu {
	struct rl_backend be;
	const struct rl_model *m;
	uint32_t dim, hd, qd, kvd, hid, vocab, nl, nh, nkv;
	uint32_t n_blocks, bs, max_tokens, max_seqs;
	size_t layer_stride;           /* elements per layer of the KV pool */
	int kv_f16;                    /* pool elements are IEEE halves, else fp32 */
	void *kpool, *vpool;           /* [nl, n_blocks, nkv, bs, hd] of uint16_t or float */
	float *x;                      /* [max_tokens, dim] residual stream */
	float *xb;                     /* [max_tokens, dim] normed input of a sublayer */
	float *xb_own;                 /* [n_threads, OWN_ROWS, dim] the same, each worker's (norm_rows) */
	float *q;                      /* [max_tokens, qd] */
	float *k, *v;                  /* [max_tokens, kvd] this step's keys/values before paging */
	float *att;                    /* [max_tokens, qd] attention output */
	float *hb, *hb2;               /* [max_tokens, hid] gate / up */
	/* mixture of experts (moe_ffn) */
	uint32_t ne, ne_used;          /* experts, used per row; 0 for a dense model */
	float *rlog;                   /* [max_tokens, ne] router logits */
	uint32_t *exp_n;               /* [ne] rows routed to each expert this layer */
	uint32_t *exp_rows;            /* [ne, max_tokens] their row indices */
	float *exp_w;                  /* [ne, max_tokens] and weights */
	float *xg, *xd;                /* [max_tokens, dim] an expert's gathered inputs / outputs */
	float *xs;                     /* [max_seqs, dim] final-normed last rows of sampling seqs */
	float *logits;                 /* [max_seqs, vocab] LM head output of those rows */
	float *inv_freq;               /* [2, hd/2] RoPE frequencies: the global layers', the local ones' */
	float *rope_cs;                /* [2, max_tokens, hd/2, 2] each row's RoPE cos, sin this step, */
	                               /* for the global layers, then (has_local) the local ones */
	int has_local;                 /* some layer has a sliding window (rl_layer_window) */
	uint32_t rot;                  /* dims of a head RoPE rotates (rl_rope_dims) */
	float q_rescale;               /* queries times this before attention, whose scale is */
	                               /* 1/sqrt(hd) (rl_attn_scale), 1 when it is the model's */
	float *attn_scratch;           /* [n_threads, attn_scratch_size] */
	void  *qscratch;               /* [n_threads] x qscratch_size bytes: rl_cpu_qmatmul's */
	size_t qscratch_size;
	size_t attn_scratch_size;      /* floats: rl_cpu_attention_scratch of a full-budget chunk */
	void  *samp_scratch;           /* [n_threads] x rl_sample_scratch_size(vocab) */
	size_t samp_scratch_size;
	/* the rows that sample: each sampling seq's last, and a verifying seq's draft rows */
	uint32_t *samp_seq;            /* [max_tokens] batch seq of each */
	uint32_t *samp_row;            /* [max_tokens] its row of x */
	uint32_t *samp_pos;            /* [max_tokens] position of the token it samples (the RNG key) */
	int32_t **samp_dst;            /* [max_tokens] where its token goes: tok_out, or draft_out */
	const uint32_t **samp_mask;    /* [max_tokens] its constraint's mask, NULL for none */
	int32_t  *logit_row;           /* [max_seqs] sampling row of each batch seq's last row, -1 if none */
	int32_t  *tok_out;             /* [max_seqs] sampled token per batch seq, -1 if none */
	struct rl_lp *lp;              /* [max_seqs] log-probabilities of the seqs that asked */
	/* prompt log-probabilities this step: the scored rows (validate), seq i's from plp_start[i] */
	uint32_t n_plp;
	uint32_t *plp_row, *plp_tok, *plp_ntop;   /* [max_tokens] row, its target token, alternatives */
	uint32_t *plp_start;           /* [max_seqs + 1] */
	struct rl_lp *plp;             /* [max_tokens] */
	uint32_t n_samp;
	uint32_t n_seqs_last;          /* seqs of the last launched batch (for the logits hook) */
	struct att_item *items;        /* [max_seqs * nkv] this step's attention work (plan_attention) */
	uint32_t n_items;

	/* thread pool */
	int n_threads;
	int n_active;                  /* workers that take part in this step (see launch) */
	uint64_t layer_flops;          /* 2 * weights of one layer: matmul FLOPs per row */
	uint64_t layer_bytes;          /* bytes of layer 0's dense matrices: a decode step's stream */
	uint32_t min_work;             /* matmul FLOPs per layer that justify one more worker */
	pthread_t *th;
	const struct rl_batch *cur;
	/* the step's matrix product: rl_cpu_qmatmul, or rl_cpu_qmatmul_det when the step is
	 * deterministic (rl_batch.deterministic); set with cur, before the workers are told */
	void (*qmm)(float *Y, size_t ldy, const float *X, size_t ldx, const struct rl_wmat *W, const float *bias,
		    uint32_t n_rows, uint32_t o_begin, uint32_t o_end, int accumulate, void *scratch);
	_Atomic uint32_t gen;          /* futex word: step counter << 8 | n_active of that step */
	_Atomic uint32_t done;         /* futex word: 1 when the step is finished */
	_Atomic uint32_t bar_count, bar_gen, sleepers;
	_Atomic uint32_t next_item;    /* attention work counter */
	_Atomic int stop;
};

static long futex(_Atomic uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)w, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

/* Waits until *w != old: spin, then yield, then sleep. Sleeping is the last resort because
 * waking a sleeping thread costs tens of µs (far more on a VM, where the vCPU halts), which
 * would dominate a decode step with its six barriers a layer. Wakers check `sleepers` after their store
 * (both seq_cst), so a waiter counted before the store is woken, one counted after sees it. */
static void wait_change(struct cpu *c, _Atomic uint32_t *w, uint32_t old)
{
	for (int i = 0; i < SPIN_PAUSES; i++) {
		if (atomic_load_explicit(w, memory_order_acquire) != old)
			return;
		rl_cpu_relax();
	}
	for (uint64_t t0 = rl_now_ns(); rl_now_ns() - t0 < SPIN_YIELD_NS;) {
		if (atomic_load_explicit(w, memory_order_acquire) != old)
			return;
		sched_yield();
	}
	atomic_fetch_add(&c->sleepers, 1);
	while (atomic_load(w) == old)
		futex(w, FUTEX_WAIT, old);
	atomic_fetch_sub(&c->sleepers, 1);
}

static void wake_all(struct cpu *c, _Atomic uint32_t *w)
{
	if (atomic_load(&c->sleepers))
		futex(w, FUTEX_WAKE, INT_MAX);
}

static void barrier(struct cpu *c)
{
	/* read before arriving: once the last worker arrives the step may end and launch may
	 * rewrite n_active */
	uint32_t n = (uint32_t)c->n_active;
	if (n == 1)
		return;
	uint32_t g = atomic_load(&c->bar_gen);
	if (atomic_fetch_add(&c->bar_count, 1) == n - 1) {
		atomic_store(&c->bar_count, 0);
		atomic_store(&c->bar_gen, g + 1);
		wake_all(c, &c->bar_gen);
	} else {
		wait_change(c, &c->bar_gen, g);
	}
}

/* [lo, hi) of n items for thread t, in multiples of `align` so matmul tiles stay whole. */
static void split(uint32_t n, uint32_t align, int t, int nt, uint32_t *lo, uint32_t *hi)
{
	uint32_t units = (n + align - 1) / align;
	uint32_t a = (uint32_t)((uint64_t)units * t / nt) * align;
	uint32_t b = (uint32_t)((uint64_t)units * (t + 1) / nt) * align;
	*lo = a < n ? a : n;
	*hi = b < n ? b : n;
}

/* Thread t's share of the output columns of Y = X W^T, W as the model stores it. */
static void matmul_part(struct cpu *c, int t, float *Y, size_t ldy, const float *X, size_t ldx,
			const struct rl_wmat *W, const float *bias, uint32_t rows, int acc)
{
	uint32_t lo, hi;
	split(W->rows, rl_cpu_wmat_grain(W), t, c->n_active, &lo, &hi);   /* whole packed groups */
	if (lo < hi)
		c->qmm(Y, ldy, X, ldx, W, bias, rows, lo, hi, acc,
			       (char *)c->qscratch + (size_t)t * c->qscratch_size);
}

/* Y[r, o - o0] for the outputs [o0 + lo, o0 + hi) of W: one expert's rows of a stacked matrix
 * into a buffer of its own width (rl_cpu_qmatmul indexes Y by the output row). */
static void expert_matmul(struct cpu *c, int t, float *Y, size_t ldy, const float *X, size_t ldx,
			  const struct rl_wmat *W, uint32_t rows, uint32_t o0, uint32_t lo, uint32_t hi)
{
	if (lo < hi)
		c->qmm((float *)((uintptr_t)Y - (uintptr_t)o0 * sizeof(float)), ldy, X, ldx, W, NULL, rows,
			       o0 + lo, o0 + hi, 0, (char *)c->qscratch + (size_t)t * c->qscratch_size);
}

/* Mixture of experts (rl_ref.c's moe_ffn): router logits for every row, then each row's top
 * ne_used experts weighted by their renormalised softmax. Rows are grouped by expert, so each
 * expert's weights stream once per step whatever the batch: a decode batch of B rows and a
 * prefill chunk alike are, per expert, the rows routed to it gathered into xg [n_e, dim]; the
 * expert's gate/up [n_e, hid] (workers split hid), silu-mul, down [n_e, dim] (workers split
 * dim) into xd; then x[row] += w * xd (workers split the rows: an expert holds a row once). */
static void moe_ffn(struct cpu *c, int t, const struct rl_layer *L, const float *xb, uint32_t T)
{
	const uint32_t dim = c->dim, hid = c->hid, ne = c->ne, k = c->ne_used;
	const int nt = c->n_active;
	uint32_t a0, a1;
	split(ne, 1, t, nt, &a0, &a1);
	expert_matmul(c, t, c->rlog, ne, xb, dim, &L->mrouter, T, 0, a0, a1);
	barrier(c);
	if (t == 0) {                  /* the routing: T * ne compares, small beside the matmuls */
		memset(c->exp_n, 0, ne * sizeof *c->exp_n);
		for (uint32_t r = 0; r < T; r++) {
			const float *lg = c->rlog + (size_t)r * ne;
			uint32_t pick[RL_MAX_EXPERTS_USED];
			float w[RL_MAX_EXPERTS_USED], mx = -INFINITY, sum = 0;
			for (uint32_t j = 0; j < k; j++) {
				uint32_t best = UINT32_MAX;
				for (uint32_t e = 0; e < ne; e++) {
					int taken = 0;
					for (uint32_t i = 0; i < j; i++)
						taken |= pick[i] == e;
					if (!taken && (best == UINT32_MAX || lg[e] > lg[best]))
						best = e;
				}
				pick[j] = best;
				mx = lg[best] > mx ? lg[best] : mx;
			}
			for (uint32_t j = 0; j < k; j++)
				sum += w[j] = expf(lg[pick[j]] - mx);
			for (uint32_t j = 0; j < k; j++) {
				const uint32_t e = pick[j], n = c->exp_n[e]++;
				c->exp_rows[(size_t)e * c->max_tokens + n] = r;
				c->exp_w[(size_t)e * c->max_tokens + n] = w[j] / sum;
			}
		}
	}
	barrier(c);
	for (uint32_t e = 0; e < ne; e++) {
		const uint32_t n = c->exp_n[e];
		if (!n)
			continue;
		const uint32_t *rows = c->exp_rows + (size_t)e * c->max_tokens;
		const float *w = c->exp_w + (size_t)e * c->max_tokens;
		uint32_t r0, r1;
		split(n, 1, t, nt, &r0, &r1);
		for (uint32_t i = r0; i < r1; i++)
			memcpy(c->xg + (size_t)i * dim, xb + (size_t)rows[i] * dim, dim * sizeof(float));
		barrier(c);
		uint32_t h0, h1, d0, d1;
		split(hid, 16, t, nt, &h0, &h1);
		expert_matmul(c, t, c->hb, hid, c->xg, dim, &L->mgate_exps, n, e * hid, h0, h1);
		expert_matmul(c, t, c->hb2, hid, c->xg, dim, &L->mup_exps, n, e * hid, h0, h1);
		for (uint32_t r = 0; r < n && h0 < h1; r++)
			rl_cpu_silu_mul(c->hb + (size_t)r * hid + h0, c->hb2 + (size_t)r * hid + h0, h1 - h0);
		barrier(c);
		split(dim, 16, t, nt, &d0, &d1);
		expert_matmul(c, t, c->xd, dim, c->hb, hid, &L->mdown_exps, n, e * dim, d0, d1);
		barrier(c);
		for (uint32_t i = r0; i < r1; i++) {
			float *x = c->x + (size_t)rows[i] * dim;
			const float *y = c->xd + (size_t)i * dim;
			for (uint32_t j = 0; j < dim; j++)
				x[j] += w[i] * y[j];
		}
		barrier(c);
	}
}

/* The attention view of sequence s's KV head kh in one layer's pools (kl, vl; each
 * [n_blocks, nkv, bs, hd]): its [bs, hd] tile in block 0, blocks block_stride apart. */
static struct rl_cpu_kv_view kv_view(const struct cpu *c, const char *kl, const char *vl,
				     const struct rl_batch_seq *s, uint32_t kh)
{
	const uint32_t hd = c->hd;
	const size_t o = (size_t)kh * c->bs * hd * (c->kv_f16 ? 2 : 4);
	return (struct rl_cpu_kv_view){
		.k = c->kv_f16 ? NULL : (const float *)(kl + o),
		.v = c->kv_f16 ? NULL : (const float *)(vl + o),
		.hk = c->kv_f16 ? (const uint16_t *)(kl + o) : NULL,
		.hv = c->kv_f16 ? (const uint16_t *)(vl + o) : NULL,
		.block_table = s->block_table, .block_size = c->bs,
		.block_stride = (size_t)c->nkv * c->bs * hd,
	};
}

/* Element offset in a layer's pool of row r's slot for KV head 0 (head h: + h * bs * hd) */
static size_t kv_slot(const struct cpu *c, const struct rl_batch *b, uint32_t r)
{
	const struct rl_batch_seq *s = &b->seqs[b->row_seq[r]];
	const uint32_t p = b->pos[r];
	return ((size_t)s->block_table[p / c->bs] * c->nkv * c->bs + p % c->bs) * c->hd;
}

/* Row r's K and V slots of KV head h in one layer's pools, for writing: asked for before the
 * q/k/v matmuls by the worker that writes them after (its (row, KV head) units), so that the
 * stores find the lines (a slot is a few lines of a block anywhere in the pool, last touched
 * steps ago). Inlined: GCC's IPA drops calls to a function that only prefetches (see
 * kv_prefetch_blocks in cpu_attention.c). */
static inline __attribute__((always_inline)) void kv_slot_prefetch(const struct cpu *c, const struct rl_batch *b,
								   uint32_t r, uint32_t h, const char *kl,
								   const char *vl, size_t es)
{
	const size_t at = (kv_slot(c, b, r) + (size_t)h * c->bs * c->hd) * es;
	for (size_t l = 0; l < c->hd * es; l += 64) {
		__builtin_prefetch(kl + at + l, 1, 3);
		__builtin_prefetch(vl + at + l, 1, 3);
	}
}

/* The first blocks of attention item it (at most max_blocks a head; 0: as many as the
 * attention loop runs ahead, or one where the loop walks whole blocks) */
static void item_prefetch(const struct cpu *c, const struct rl_batch *b, const char *kl, const char *vl,
			  uint32_t it, uint32_t max_blocks)
{
	const struct att_item *a = &c->items[it];
	const struct rl_batch_seq *s = &b->seqs[a->seq];
	if (s->q_len == 1)
		max_blocks = 1;
	for (uint32_t kh = a->kh; kh < a->kh + a->n_kv; kh++) {
		struct rl_cpu_kv_view kv = kv_view(c, kl, vl, s, kh);
		rl_cpu_attention_prefetch(&kv, s->ctx_len, c->hd, max_blocks);
	}
}

/* Most prefill row ranges a step's attention is cut into: items beyond the (sequence, KV
 * head) ones (the items array's spare room) */
#define ATT_SPLIT_ITEMS(n_threads) (4 * (uint32_t)(n_threads))

/* The step's attention items. A prefill chunk's rows take (sequence, KV head) items, whose
 * rows re-read a head's blocks from cache; where those are fewer than four a worker (Gemma 3:
 * one KV head, so one worker did a chunk's attention while the others waited), each is cut
 * into row ranges of about equal keys (a row's cost grows with its position; rows of 4, the
 * kernels' sets), the last rows first since the workers take items in turn. A row's result
 * never depends on which rows share its call, so the cut changes no bits. A decode row takes
 * its KV heads together (rl_cpu_attention_heads reads each block's heads as one run, which
 * the hardware prefetcher follows where head-by-head tiles a block apart defeat it), in as
 * few parts as still give every worker two items. */
static void plan_attention(struct cpu *c, const struct rl_batch *b)
{
	const uint32_t n_dec = b->n_seqs - b->n_prefill, want = c->n_active > 1 ? 2 * (uint32_t)c->n_active : 1;
	uint32_t parts = n_dec && n_dec < want ? (want + n_dec - 1) / n_dec : 1;
	parts = parts < c->nkv ? parts : c->nkv;
	const uint32_t per = (c->nkv + parts - 1) / parts;
	const uint32_t pre = b->n_prefill * c->nkv, want_pre = c->n_active > 1 ? ATT_SPLIT_ITEMS(c->n_active) : 1;
	const uint32_t cuts = pre && pre < want_pre ? (want_pre + pre - 1) / pre : 1;
	c->n_items = 0;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		if (s->q_len == 1) {
			for (uint32_t kh = 0; kh < c->nkv; kh += per)
				c->items[c->n_items++] = (struct att_item){ i, kh, c->nkv - kh < per ? c->nkv - kh : per, 0, 1 };
			continue;
		}
		/* row ranges of about equal keys: row j sees pos0 + j + 1 of them (windows aside) */
		uint32_t k = s->q_len / 16;             /* ranges of at least 16 rows */
		k = k < cuts ? k : cuts;
		k = k < 64 ? k : 64;
		k = k ? k : 1;
		const uint64_t pos0 = s->ctx_len - s->q_len;
		const uint64_t total = (uint64_t)s->q_len * pos0 + (uint64_t)s->q_len * (s->q_len + 1) / 2;
		uint32_t bound[ATT_SPLIT_ITEMS(64) + 2], nb = 0, j = 0;
		uint64_t acc = 0;
		bound[nb++] = 0;
		for (uint32_t p = 1; p < k; p++) {
			const uint64_t target = total * p / k;
			while (j < s->q_len && acc + pos0 + j + 1 <= target)
				acc += pos0 + j++ + 1;
			const uint32_t e = (j + 2) / 4 * 4;
			if (e > bound[nb - 1] && e < s->q_len)
				bound[nb++] = e;
		}
		bound[nb++] = s->q_len;
		for (uint32_t p = nb - 1; p > 0; p--)
			for (uint32_t kh = 0; kh < c->nkv; kh++)
				c->items[c->n_items++] = (struct att_item){ i, kh, 1, bound[p - 1], bound[p] };
	}
}

/* The rows that a sublayer's matmuls read, normed by w: row j is x row rows[j] (rows NULL:
 * row j). Steps of at most OWN_ROWS rows have every worker norm all of them into its own
 * buffer and go on (a few µs of duplicated work), where splitting them left the other workers
 * at a barrier and the rows' lines to cross cores: 110M Q4_K_M decode at two threads on the
 * Zen 4 VM spent 12-17% of a batch-1 step waiting at barriers, and this took two of the eight
 * a layer away (in one process, alternating: batch 1 +0-4%, batch 8 +0.5%). Larger steps
 * split the rows into the shared buffer, then wait. Returns the buffer. */
static const float *norm_rows(struct cpu *c, int t, const float *w, uint32_t n, const uint32_t *rows,
			      float *shared)
{
	const uint32_t dim = c->dim;
	const int own = n <= OWN_ROWS;
	float *out = own ? c->xb_own + (size_t)t * OWN_ROWS * dim : shared;
	uint32_t j0 = 0, j1 = n;
	if (!own)
		split(n, 1, t, c->n_active, &j0, &j1);
	for (uint32_t j = j0; j < j1; j++)
		rl_cpu_rmsnorm(out + (size_t)j * dim, c->x + (size_t)(rows ? rows[j] : j) * dim, w, dim,
			       c->m->cfg.norm_eps);
	if (!own)
		barrier(c);
	return out;
}

/* x[r] += rmsnorm(y[r]) w for the step's T rows, by rows (Gemma 3's norms of a sublayer's
 * output, y [T, dim], normed in place); then the barrier. */
static void add_normed(struct cpu *c, int t, float *y, const float *w, uint32_t T)
{
	const uint32_t dim = c->dim;
	uint32_t r0, r1;
	split(T, 1, t, c->n_active, &r0, &r1);
	for (uint32_t r = r0; r < r1; r++) {
		float *yr = y + (size_t)r * dim, *xr = c->x + (size_t)r * dim;
		rl_cpu_rmsnorm(yr, yr, w, dim, c->m->cfg.norm_eps);
		for (uint32_t i = 0; i < dim; i++)
			xr[i] += yr[i];
	}
	barrier(c);
}

/* The final norm and LM head for rows[k0 .. k0 + max_seqs) of n (the logits buffer holds
 * max_seqs rows), then this participant's share [*j0, *j1) of those logits rows */
static void head_chunk(struct cpu *c, int t, const uint32_t *rows, uint32_t n, uint32_t k0,
		       uint32_t *j0, uint32_t *j1)
{
	const uint32_t k = n - k0 < c->max_seqs ? n - k0 : c->max_seqs;
	const float *x = norm_rows(c, t, c->m->out_norm, k, rows + k0, c->xs);
	matmul_part(c, t, c->logits, c->vocab, x, c->dim, &c->m->mwcls, NULL, k, 0);
	barrier(c);
	split(k, 1, t, c->n_active, j0, j1);
}

/* One step, run by every worker t. */
static void forward(struct cpu *c, int t)
{
	const struct rl_batch *b = c->cur;
	const struct rl_model *m = c->m;
	const struct rl_model_config *cfg = &m->cfg;
	uint32_t T = b->n_tokens, dim = c->dim, hd = c->hd, qd = c->qd, kvd = c->kvd, hid = c->hid;
	uint32_t group = c->nh / c->nkv, r0, r1;
	int nt = c->n_active;

	split(T, 1, t, nt, &r0, &r1);
	/* the (row, KV head) units of this worker's RoPE and KV writes */
	uint32_t u0, u1;
	split(T * c->nkv, 1, t, nt, &u0, &u1);
	for (uint32_t r = r0; r < r1; r++) {
		float *xr = c->x + (size_t)r * dim;
		rl_cpu_wmat_row(&m->mtok_emb, b->tokens[r], xr);
		if (cfg->emb_scale > 0)                          /* Gemma: times sqrt(dim) */
			for (uint32_t i = 0; i < dim; i++)
				xr[i] *= cfg->emb_scale;
		/* the same rows' angles for every layer (this thread's rows in the RoPE loop too);
		 * local layers' positions are unscaled */
		rl_cpu_rope_angles(c->rope_cs + (size_t)r * hd, c->rot, (float)b->pos[r] / cfg->rope_scale, c->inv_freq,
				   cfg->rope_attn_factor > 0 ? cfg->rope_attn_factor : 1.0f);
		if (c->has_local)
			rl_cpu_rope_angles(c->rope_cs + ((size_t)c->max_tokens + r) * hd, c->rot, (float)b->pos[r],
					   c->inv_freq + hd / 2, 1.0f);
	}
	barrier(c);

	for (uint32_t l = 0; l < c->nl; l++) {
		const struct rl_layer *L = &m->layers[l];
		const size_t es = c->kv_f16 ? 2 : 4;                 /* bytes an element */
		const uint32_t window = rl_layer_window(cfg, l);     /* 0: a global layer */
		const float *rope_cs = c->rope_cs + (window ? (size_t)c->max_tokens * hd : 0);
		char *kl = (char *)c->kpool + l * c->layer_stride * es;   /* [n_blocks, nkv, bs, hd] */
		char *vl = (char *)c->vpool + l * c->layer_stride * es;

		/* ahead of the q/k/v matmuls, which hide the misses: the KV slots this worker writes
		 * after them (its (row, KV head) units), and the first block of every attention item
		 * (this thread's share of them; the item's own loop runs ahead from there). The pool
		 * was last read a step ago, before a whole model's weights streamed through the
		 * caches. One first block per item: prefetching more of them, or the next layer's
		 * during the FFN, measured no better (bench/results/cpu-kernel-decisions-2026-11.md) */
		for (uint32_t u = u0; u < u1; u++)
			kv_slot_prefetch(c, b, u / c->nkv, u % c->nkv, kl, vl, es);
		uint32_t i0, i1;
		split(c->n_items, 1, t, nt, &i0, &i1);
		for (uint32_t it = i0; it < i1; it++)
			item_prefetch(c, b, kl, vl, it, 1);
		const float *xb = norm_rows(c, t, L->attn_norm, T, NULL, c->xb);
		matmul_part(c, t, c->q, qd, xb, dim, &L->mq, L->bq, T, 0);
		matmul_part(c, t, c->k, kvd, xb, dim, &L->mk, L->bk, T, 0);
		matmul_part(c, t, c->v, kvd, xb, dim, &L->mv, L->bv, T, 0);
		if (t == 0)
			atomic_store_explicit(&c->next_item, 0, memory_order_relaxed);
		barrier(c);

		/* RoPE at each row's position, then k, v into the row's slot of its block: by
		 * (row, KV head) units, so that a batch-1 step's heads are shared out too (by rows,
		 * one worker did them all while the others waited) */
		for (uint32_t u = u0; u < u1; u++) {
			const uint32_t r = u / c->nkv, h = u % c->nkv;
			const float *cs = rope_cs + (size_t)r * hd;
			float *qh = c->q + (size_t)r * qd + (size_t)h * group * hd;           /* [group, hd] */
			float *kh = c->k + (size_t)r * kvd + (size_t)h * hd, *vh = c->v + (size_t)r * kvd + (size_t)h * hd;
			for (uint32_t g = 0; g < group && L->q_norm; g++)   /* Qwen3: each head normed */
				rl_cpu_rmsnorm(qh + (size_t)g * hd, qh + (size_t)g * hd, L->q_norm, hd, cfg->norm_eps);
			if (L->k_norm)
				rl_cpu_rmsnorm(kh, kh, L->k_norm, hd, cfg->norm_eps);
			rl_cpu_rope(qh, group, hd, c->rot, cs, cfg->rope_halves);
			rl_cpu_rope(kh, 1, hd, c->rot, cs, cfg->rope_halves);
			if (c->q_rescale != 1.0f)                 /* Gemma 3 27B's query_pre_attn_scalar */
				for (uint32_t i = 0; i < group * hd; i++)
					qh[i] *= c->q_rescale;
			const size_t at = (kv_slot(c, b, r) + (size_t)h * c->bs * hd) * es;
			if (c->kv_f16) {
				rl_cpu_f32_to_f16((uint16_t *)(kl + at), kh, hd);
				rl_cpu_f32_to_f16((uint16_t *)(vl + at), vh, hd);
			} else {
				memcpy(kl + at, kh, hd * sizeof(float));
				memcpy(vl + at, vh, hd * sizeof(float));
			}
		}
		barrier(c);

		/* attention: the step's items (plan_attention), each for the query heads that share
		 * its KV heads (they read the same keys), handed out dynamically since a prefill
		 * chunk's item costs far more than a decode row's */
		for (;;) {
			uint32_t it = atomic_fetch_add_explicit(&c->next_item, 1, memory_order_relaxed);
			if (it >= c->n_items)
				break;
			const struct att_item *a = &c->items[it];
			const struct rl_batch_seq *s = &b->seqs[a->seq];
			const size_t h = (size_t)a->kh * group * hd;
			struct rl_cpu_kv_view kv = kv_view(c, kl, vl, s, a->kh);
			kv.window = window;
			float *scr = c->attn_scratch + (size_t)t * c->attn_scratch_size;
			if (it + 1 < c->n_items)       /* the next item's first blocks, while this one runs */
				item_prefetch(c, b, kl, vl, it + 1, 0);
			if (s->q_len == 1)
				rl_cpu_attention_heads(c->att + (size_t)s->q_start * qd + h, c->q + (size_t)s->q_start * qd + h,
						       a->n_kv, group, s->ctx_len, hd, &kv, scr);
			else
				rl_cpu_attention(c->att + (size_t)(s->q_start + a->r0) * qd + h, qd,
						 c->q + (size_t)(s->q_start + a->r0) * qd + h, qd, a->r1 - a->r0, group,
						 s->ctx_len - s->q_len + a->r0, hd, &kv, scr);
		}
		barrier(c);
		if (L->attn_post_norm) {                            /* x += norm(wo att) */
			matmul_part(c, t, c->xb, dim, c->att, qd, &L->mo, NULL, T, 0);
			barrier(c);
			add_normed(c, t, c->xb, L->attn_post_norm, T);
		} else {
			matmul_part(c, t, c->x, dim, c->att, qd, &L->mo, NULL, T, 1);  /* x += wo att */
			barrier(c);
		}

		xb = norm_rows(c, t, L->ffn_norm, T, NULL, c->xb);
		if (c->ne) {
			moe_ffn(c, t, L, xb, T);
			continue;
		}
		/* gate and up over the same column range, so silu-mul needs no barrier */
		uint32_t h0, h1;
		uint32_t gg = rl_cpu_wmat_grain(&L->mgate), gu = rl_cpu_wmat_grain(&L->mup);
		split(hid, gg > gu ? gg : gu, t, nt, &h0, &h1);     /* 4 | 16 | 48: the larger serves both */
		if (h0 < h1) {
			void *qs = (char *)c->qscratch + (size_t)t * c->qscratch_size;
			c->qmm(c->hb, hid, xb, dim, &L->mgate, NULL, T, h0, h1, 0, qs);
			c->qmm(c->hb2, hid, xb, dim, &L->mup, NULL, T, h0, h1, 0, qs);
			for (uint32_t r = 0; r < T; r++)
				(cfg->ffn_gelu ? rl_cpu_gelu_mul : rl_cpu_silu_mul)(c->hb + (size_t)r * hid + h0,
										   c->hb2 + (size_t)r * hid + h0, h1 - h0);
		}
		barrier(c);
		if (L->ffn_post_norm) {                             /* x += norm(down) */
			matmul_part(c, t, c->xb, dim, c->hb, hid, &L->mdown, NULL, T, 0);
			barrier(c);
			add_normed(c, t, c->xb, L->ffn_post_norm, T);
			continue;
		}
		matmul_part(c, t, c->x, dim, c->hb, hid, &L->mdown, NULL, T, 1); /* x += down */
		barrier(c);
	}

	/* prompt log-probabilities: the scored rows, max_seqs at a time through the LM head (the
	 * logits buffer's rows), before the sampling rows take that buffer */
	for (uint32_t k0 = 0; k0 < c->n_plp; k0 += c->max_seqs) {
		uint32_t p0, p1;
		head_chunk(c, t, c->plp_row, c->n_plp, k0, &p0, &p1);
		for (uint32_t j = p0; j < p1; j++) {
			struct rl_lp *lp = &c->plp[k0 + j];
			lp->n_top = c->plp_ntop[k0 + j];
			lp->logprob = rl_sample_logprobs(c->logits + (size_t)j * c->vocab, c->vocab, c->plp_tok[k0 + j],
							 &lp->n_top, lp->top_id, lp->top_lp);
		}
		barrier(c);
	}

	/* final norm and LM head only for the rows that sample, max_seqs at a time (the logits
	 * buffer's rows: more only when drafts are verified). n_samp is read once, here: after
	 * the step's last barrier participant 0 may already be validating the next step */
	const uint32_t n_samp = c->n_samp;
	for (uint32_t k0 = 0; k0 < n_samp; k0 += c->max_seqs) {
		uint32_t s0, s1;
		head_chunk(c, t, c->samp_row, n_samp, k0, &s0, &s1);
		for (uint32_t j = s0; j < s1; j++) {
			const uint32_t i = c->samp_seq[k0 + j];
			const struct rl_batch_seq *s = &b->seqs[i];
			float *lg = c->logits + (size_t)j * c->vocab;
			if (c->samp_mask[k0 + j])      /* a constrained row: its distribution restricted */
				rl_sample_mask(lg, c->vocab, c->samp_mask[k0 + j]);
			const int32_t tok = (int32_t)rl_sample(lg, c->vocab, &s->sp, c->samp_pos[k0 + j],
							       (char *)c->samp_scratch + (size_t)t * c->samp_scratch_size);
			*c->samp_dst[k0 + j] = tok;
			if (s->logprobs) {             /* asked for: off, this costs nothing (never with drafts) */
				struct rl_lp *lp = &c->lp[i];
				lp->n_top = s->logprobs - 1 < RL_MAX_TOP_LOGPROBS ? s->logprobs - 1 : RL_MAX_TOP_LOGPROBS;
				lp->logprob = rl_sample_logprobs(lg, c->vocab, (uint32_t)tok, &lp->n_top, lp->top_id, lp->top_lp);
			}
		}
		barrier(c);
	}
	if (!n_samp)
		barrier(c);                    /* the step's last barrier: run_share relies on it */
}

static void *worker(void *arg)
{
	struct cpu *c = ((void **)arg)[0];
	int t = (int)(intptr_t)((void **)arg)[1];
	free(arg);
	uint32_t seen = 0;
	for (;;) {
		wait_change(c, &c->gen, seen);
		/* n_active comes from the same word as the step, so a worker that idled through
		 * a step never mistakes the next step's worker count for it (and a step it is
		 * part of cannot finish without it, so it never misses one) */
		seen = atomic_load(&c->gen);
		if (atomic_load(&c->stop))
			return NULL;
		if (t >= (int)(seen & 0xff))
			continue;
		forward(c, t);
	}
}

/* Every index the step will follow is checked here, before any worker touches memory. */
static int validate(struct cpu *c, const struct rl_batch *b)
{
	if (b->block_size != c->bs || b->n_tokens > c->max_tokens || b->n_seqs > c->max_seqs ||
	    b->n_prefill > b->n_seqs)
		return -EINVAL;
	c->n_samp = 0;
	c->n_seqs_last = 0;
	c->n_plp = 0;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		if (!s->q_len || s->q_start > b->n_tokens || s->q_len > b->n_tokens - s->q_start ||
		    s->ctx_len < s->q_len || s->n_blocks < (s->ctx_len + c->bs - 1) / c->bs)
			return -EINVAL;
		c->plp_start[i] = c->n_plp;
		if (s->prompt_logprobs && s->plp_hi > s->plp_lo) {   /* the rows predicting [lo, hi) */
			const uint32_t p0 = s->ctx_len - s->q_len;        /* row 0's position */
			if (s->plp_lo < p0 + 1 || s->plp_hi > s->ctx_len + 1 || s->prompt_logprobs > 1 + RL_MAX_TOP_LOGPROBS)
				return -EINVAL;
			for (uint32_t p = s->plp_lo; p < s->plp_hi; p++) {
				const uint32_t r = p - 1 - p0;
				const uint32_t tgt = r + 1 < s->q_len ? b->tokens[s->q_start + r + 1] : s->next_token;
				if (tgt >= c->vocab)
					return -EINVAL;
				c->plp_row[c->n_plp] = s->q_start + r;
				c->plp_tok[c->n_plp] = tgt;
				c->plp_ntop[c->n_plp++] = s->prompt_logprobs - 1;
			}
		}
		if ((i >= b->n_prefill && s->q_len != 1) ||
		    (s->n_draft && (!s->sample || s->n_draft >= s->q_len || !s->draft_out || s->logprobs)) ||
		    (s->allow && !s->sample))
			return -EINVAL;
		const size_t words = rl_sample_mask_words(c->vocab);
		for (uint32_t j = 0; s->allow && j <= s->n_draft; j++)
			if (!rl_sample_mask_any(s->allow + j * words, c->vocab))
				return -EINVAL;
		for (uint32_t k = 0; k < (s->ctx_len + c->bs - 1) / c->bs; k++)
			if (s->block_table[k] >= c->n_blocks)
				return -EINVAL;
		c->logit_row[i] = -1;
		c->tok_out[i] = -1;
		for (uint32_t j = 0; s->sample && j <= s->n_draft; j++) {   /* the drafts' rows, then the last */
			c->samp_row[c->n_samp] = s->q_start + s->q_len - 1 - s->n_draft + j;
			c->samp_pos[c->n_samp] = s->ctx_len - s->n_draft + j;
			c->samp_dst[c->n_samp] = j < s->n_draft ? &s->draft_out[j] : &c->tok_out[i];
			c->samp_mask[c->n_samp] = s->allow ? s->allow + j * words : NULL;
			c->samp_seq[c->n_samp++] = i;
		}
		if (s->sample)
			c->logit_row[i] = (int32_t)c->n_samp - 1;
	}
	for (uint32_t r = 0; r < b->n_tokens; r++) {
		if (b->tokens[r] >= c->vocab || b->row_seq[r] >= b->n_seqs)
			return -EINVAL;
		const struct rl_batch_seq *s = &b->seqs[b->row_seq[r]];
		if (r < s->q_start || r - s->q_start >= s->q_len ||
		    b->pos[r] != s->ctx_len - s->q_len + (r - s->q_start))
			return -EINVAL;
	}
	c->plp_start[b->n_seqs] = c->n_plp;
	c->n_seqs_last = b->n_seqs;
	return 0;
}

/* 1 when some row of the step is a prompt's (not a decode token, not a draft): then the
 * matrix products take rl_cpu_qmatmul_prompt's kernels, else rl_cpu_qmatmul_decode's */
static int has_prompt_rows(const struct rl_batch *b)
{
	for (uint32_t i = 0; i < b->n_prefill; i++) {
		const struct rl_batch_seq *q = &b->seqs[i];
		if (q->q_len > (q->sample ? 1 + q->n_draft : 0))
			return 1;
	}
	return 0;
}

static int cpu_launch(struct rl_backend *be, const struct rl_batch *b)
{
	struct cpu *c = be->priv;
	int rc = validate(c, b);
	if (rc)
		return rc;
	/* A worker is worth its barriers (six a layer in a small step) only with enough work per
	 * phase: about min_work FLOPs of matmul per layer each (small models and small steps run
	 * on fewer workers, where they are faster), or as many weight bytes of a layer: SmolLM2-135M
	 * Q4_1 at batch 1 has 7M FLOPs a layer (one worker by FLOPs) but streams 2 MB, ~130 µs. */
	uint64_t w = c->layer_flops * (b->n_tokens ? b->n_tokens : 1) / c->min_work;
	const uint64_t wb = c->layer_bytes * FLOPS_PER_WORKER_BYTE / c->min_work;
	if (wb > w)
		w = wb;
	c->n_active = w < 1 ? 1 : w < (uint64_t)c->n_threads ? (int)w : c->n_threads;
	plan_attention(c, b);
	c->qmm = b->deterministic ? rl_cpu_qmatmul_det : has_prompt_rows(b) ? rl_cpu_qmatmul_prompt : rl_cpu_qmatmul_decode;
	c->cur = b;
	atomic_store(&c->done, 0);
	/* A step of one participant is the finish() caller's alone, and the workers are not told:
	 * telling them cost a wake-up syscall when they slept, and a worker restarting its yield
	 * loop beside the runtime thread, taking turns with it on one cpu, when they did not */
	if (c->n_active > 1) {
		atomic_store(&c->gen, (((atomic_load(&c->gen) >> 8) + 1) << 8) | (uint32_t)c->n_active);
		wake_all(c, &c->gen);
	}
	return 0;
}

/* 0 until finish() has run participant 0's share: the step cannot end without it. */
static int cpu_poll(struct rl_backend *be)
{
	struct cpu *c = be->priv;
	return atomic_load_explicit(&c->done, memory_order_acquire) != 0;
}

/* Participant 0: the caller computes its share of the step; forward()'s last barrier means
 * every other participant is done when it returns. */
static void run_share(struct cpu *c)
{
	forward(c, 0);
	atomic_store_explicit(&c->done, 1, memory_order_release);
}

static int cpu_finish(struct rl_backend *be, int32_t *out)
{
	struct cpu *c = be->priv;
	if (!c->cur)
		return -EINVAL;
	run_share(c);
	for (uint32_t i = 0; i < c->cur->n_seqs; i++)
		out[i] = c->tok_out[i];
	c->cur = NULL;
	return 0;
}

/* Activations and the KV pool on 64-byte boundaries: with malloc's 16 a 32-byte load crosses a
 * cache line every other time, which the matmul's activation stream pays for (rows are whole
 * multiples of 64 bytes for every real model width, so every row starts aligned too). */
static void *amalloc(size_t n)
{
	return aligned_alloc(64, (n + 63) & ~(size_t)63);
}

static void free_all(struct cpu *c)
{
	free(c->kpool); free(c->vpool); free(c->x); free(c->xb); free(c->xb_own); free(c->q); free(c->k); free(c->v);
	free(c->rlog); free(c->exp_n); free(c->exp_rows); free(c->exp_w); free(c->xg); free(c->xd);
	free(c->att); free(c->hb); free(c->hb2); free(c->xs); free(c->logits); free(c->inv_freq); free(c->rope_cs);
	free(c->attn_scratch); free(c->qscratch); free(c->samp_scratch); free(c->samp_seq); free(c->samp_row);
	free(c->samp_pos); free(c->samp_dst); free(c->samp_mask);
	free(c->items); free(c->logit_row);
	free(c->tok_out); free(c->lp); free(c->plp_row); free(c->plp_tok); free(c->plp_ntop); free(c->plp_start);
	free(c->plp); free(c->th); free(c);
}

static void cpu_destroy(struct rl_backend *be)
{
	struct cpu *c = be->priv;
	if (c->cur)                    /* a launched step is finished before the pool stops */
		run_share(c);
	atomic_store(&c->stop, 1);
	atomic_fetch_add(&c->gen, 1 << 8);
	futex(&c->gen, FUTEX_WAKE, INT_MAX);
	for (int t = 1; t < c->n_threads; t++)
		pthread_join(c->th[t], NULL);
	free_all(c);
}

static int cpu_logprobs(struct rl_backend *be, struct rl_step_lp *out)
{
	struct cpu *c = be->priv;
	*out = (struct rl_step_lp){ .tok = c->lp, .prompt = c->plp, .prompt_start = c->plp_start,
				    .n_seqs = c->n_seqs_last };
	return 0;
}

static const struct rl_backend_ops cpu_ops = {
	.launch = cpu_launch, .poll = cpu_poll, .finish = cpu_finish, .destroy = cpu_destroy, .logprobs = cpu_logprobs,
};

int rl_backend_cpu_logits(struct rl_backend *be, uint32_t seq_index, float *out)
{
	struct cpu *c = be->priv;
	if (be->ops != &cpu_ops || seq_index >= c->n_seqs_last || c->logit_row[seq_index] < 0)
		return -ENOENT;
	const uint32_t k0 = (c->n_samp - 1) / c->max_seqs * c->max_seqs;   /* the rows still in the buffer */
	if ((uint32_t)c->logit_row[seq_index] < k0)
		return -ENOENT;
	memcpy(out, c->logits + (size_t)(c->logit_row[seq_index] - k0) * c->vocab, c->vocab * sizeof(float));
	return 0;
}

/* Every CPU we may run on: background workers on all but one, and the runtime thread (which
 * runs participant 0 in finish()) on its own. */
static int default_threads(void)
{
	cpu_set_t set;
	int n = 0;
	if (sched_getaffinity(0, sizeof set, &set) == 0)
		n = CPU_COUNT(&set);
	return n > 0 ? n : 1;
}

/* Every stored matrix of m into the layout the kernels stream best, where there is one
 * (rl_cpu_wmat_pack; a tied classifier is the embedding, packed once). */
static int pack_model(struct rl_model *m)
{
	int rc = rl_cpu_wmat_pack(&m->mtok_emb);
	if (m->mwcls.data == m->mtok_emb.data)
		m->mwcls = m->mtok_emb;
	else if (rc >= 0)
		rc = rl_cpu_wmat_pack(&m->mwcls);
	for (uint32_t l = 0; l < m->cfg.n_layers && rc >= 0; l++) {
		struct rl_layer *L = &m->layers[l];
		struct rl_wmat *w[] = { &L->mq, &L->mk, &L->mv, &L->mo, &L->mgate, &L->mup, &L->mdown,
					&L->mrouter, &L->mgate_exps, &L->mup_exps, &L->mdown_exps };
		for (size_t i = 0; i < sizeof w / sizeof *w && rc >= 0; i++)
			rc = rl_cpu_wmat_pack(w[i]);
	}
	return rc < 0 ? rc : 0;
}

int rl_backend_cpu_create(struct rl_model *m, const struct rl_backend_params *p,
			  struct rl_backend **out, char *err, size_t errlen)
{
	const struct rl_model_config *cfg = &m->cfg;
	if (!p->n_kv_blocks || !p->block_size || !p->max_batch_tokens || !p->max_seqs) {
		snprintf(err, errlen, "cpu backend: --kv-blocks, --block-size, --max-batch-tokens and max seqs must be positive");
		return -EINVAL;
	}
	if (pack_model(m)) {
		snprintf(err, errlen, "cpu backend: out of memory repacking the weights");
		return -ENOMEM;
	}
	struct cpu *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->m = m;
	c->dim = cfg->dim; c->hd = cfg->head_dim; c->hid = cfg->hidden_dim; c->vocab = cfg->vocab_size;
	c->nl = cfg->n_layers; c->nh = cfg->n_heads; c->nkv = cfg->n_kv_heads;
	c->qd = c->nh * c->hd; c->kvd = c->nkv * c->hd;
	c->n_blocks = p->n_kv_blocks; c->bs = p->block_size;
	c->max_tokens = p->max_batch_tokens; c->max_seqs = p->max_seqs;
	c->n_threads = p->threads > 0 ? p->threads : default_threads();
	if (c->n_threads > 255)        /* the step word carries the worker count in 8 bits */
		c->n_threads = 255;
	c->layer_stride = (size_t)c->n_blocks * c->bs * c->kvd;
	c->min_work = p->cpu_min_work ? p->cpu_min_work : MIN_FLOPS_PER_WORKER;
	c->layer_flops = 2ull * ((uint64_t)c->dim * (2 * c->qd + 2 * c->kvd) + 3ull * c->dim * c->hid);
	if (cfg->n_layers) {
		const struct rl_layer *L0 = &m->layers[0];
		const struct rl_wmat *ws[7] = { &L0->mq, &L0->mk, &L0->mv, &L0->mo, &L0->mgate, &L0->mdown, &L0->mup };
		for (int i = 0; i < 7; i++)
			c->layer_bytes += (uint64_t)ws[i]->rows * ws[i]->row_bytes;
	}
	size_t T = c->max_tokens, S = c->max_seqs, kv = c->layer_stride * c->nl;
	c->samp_scratch_size = (rl_sample_scratch_size(c->vocab) + 63) & ~(size_t)63;
	c->kv_f16 = p->cpu_kv_f16 != 0;
	c->kpool = amalloc(kv * (c->kv_f16 ? 2 : 4));
	c->vpool = amalloc(kv * (c->kv_f16 ? 2 : 4));
	c->x = amalloc(T * c->dim * sizeof(float));
	c->xb = amalloc(T * c->dim * sizeof(float));
	c->xb_own = amalloc((size_t)c->n_threads * OWN_ROWS * c->dim * sizeof(float));
	c->q = amalloc(T * c->qd * sizeof(float));
	c->k = amalloc(T * c->kvd * sizeof(float));
	c->v = amalloc(T * c->kvd * sizeof(float));
	c->att = amalloc(T * c->qd * sizeof(float));
	c->hb = amalloc(T * c->hid * sizeof(float));
	c->hb2 = amalloc(T * c->hid * sizeof(float));
	c->ne = cfg->n_experts;
	c->ne_used = cfg->n_experts_used;
	if (c->ne) {
		c->rlog = amalloc(T * c->ne * sizeof(float));
		c->exp_n = malloc(c->ne * sizeof *c->exp_n);
		c->exp_rows = malloc(c->ne * T * sizeof *c->exp_rows);
		c->exp_w = malloc(c->ne * T * sizeof *c->exp_w);
		c->xg = amalloc(T * c->dim * sizeof(float));
		c->xd = amalloc(T * c->dim * sizeof(float));
		if (!c->rlog || !c->exp_n || !c->exp_rows || !c->exp_w || !c->xg || !c->xd) {
			snprintf(err, errlen, "cpu backend: cannot allocate the mixture-of-experts buffers");
			free_all(c);
			return -ENOMEM;
		}
	}
	c->xs = amalloc(S * c->dim * sizeof(float));
	c->logits = amalloc(S * c->vocab * sizeof(float));
	c->inv_freq = malloc(c->hd * sizeof(float));
	c->rope_cs = malloc(2 * T * c->hd * sizeof(float));
	/* rounded to 64 bytes so threads never share a cache line */
	const uint32_t att_rows = c->max_tokens * (c->nh / c->nkv);        /* a chunk's rows, or a decode row's heads */
	c->attn_scratch_size = (rl_cpu_attention_scratch(att_rows > c->nh ? att_rows : c->nh, c->hd, c->bs) + 15) & ~(size_t)15;
	c->attn_scratch = amalloc((size_t)c->n_threads * c->attn_scratch_size * sizeof(float));
	c->samp_scratch = malloc((size_t)c->n_threads * c->samp_scratch_size);
	uint32_t max_in = c->dim > c->hid ? c->dim : c->hid;
	max_in = max_in > c->qd ? max_in : c->qd;
	c->qscratch_size = (rl_cpu_qmatmul_scratch(max_in, c->max_tokens) + 63) & ~(size_t)63;
	c->qscratch = malloc((size_t)c->n_threads * c->qscratch_size);
	c->samp_seq = malloc(T * sizeof(uint32_t));
	c->samp_row = malloc(T * sizeof(uint32_t));
	c->samp_pos = malloc(T * sizeof(uint32_t));
	c->samp_dst = malloc(T * sizeof(int32_t *));
	c->samp_mask = malloc(T * sizeof *c->samp_mask);
	c->items = malloc(((size_t)S * c->nkv + ATT_SPLIT_ITEMS(c->n_threads)) * sizeof *c->items);
	c->logit_row = malloc(S * sizeof(int32_t));
	c->tok_out = malloc(S * sizeof(int32_t));
	c->lp = malloc(S * sizeof *c->lp);
	c->plp_row = malloc(T * sizeof(uint32_t));
	c->plp_tok = malloc(T * sizeof(uint32_t));
	c->plp_ntop = malloc(T * sizeof(uint32_t));
	c->plp_start = malloc((S + 1) * sizeof(uint32_t));
	c->plp = malloc(T * sizeof *c->plp);
	c->th = calloc(c->n_threads, sizeof(pthread_t));
	if (!c->kpool || !c->vpool || !c->x || !c->xb || !c->xb_own || !c->q || !c->k || !c->v || !c->att ||
	    !c->hb || !c->hb2 || !c->xs || !c->logits || !c->inv_freq || !c->rope_cs || !c->attn_scratch ||
	    !c->samp_scratch || !c->qscratch || !c->samp_seq || !c->samp_row || !c->samp_pos || !c->samp_dst || !c->samp_mask || !c->items || !c->logit_row ||
	    !c->tok_out || !c->lp || !c->plp_row || !c->plp_tok || !c->plp_ntop || !c->plp_start || !c->plp || !c->th) {
		snprintf(err, errlen, "cpu backend: cannot allocate %.1f GiB of KV cache and buffers; lower --kv-blocks or --max-batch-tokens",
			 2.0 * kv * (c->kv_f16 ? 2 : 4) / (1 << 30));
		free_all(c);
		return -ENOMEM;
	}
	const uint32_t ctx = p->max_ctx ? p->max_ctx : cfg->max_ctx;   /* served (--ctx), or as trained */
	c->rot = rl_rope_dims(cfg);
	for (uint32_t i = 0; i < c->rot / 2; i++) {
		c->inv_freq[i] = rl_rope_inv_freq(cfg, ctx, i);
		c->inv_freq[c->hd / 2 + i] = cfg->rope_theta_local > 0 ? rl_rope_inv_freq_local(cfg, i) : c->inv_freq[i];
	}
	for (uint32_t l = 0; l < c->nl; l++)
		c->has_local |= rl_layer_window(cfg, l) != 0;
	c->q_rescale = rl_attn_scale(cfg) * sqrtf((float)c->hd);
	c->be.ops = &cpu_ops;
	c->be.priv = c;
	for (int t = 1; t < c->n_threads; t++) {   /* participant 0 is finish()'s caller */
		void **arg = malloc(2 * sizeof(void *));
		int rc = arg ? 0 : ENOMEM;
		if (arg) {
			arg[0] = c;
			arg[1] = (void *)(intptr_t)t;
			rc = pthread_create(&c->th[t], NULL, worker, arg);
			if (rc)
				free(arg);
		}
		if (rc) {
			snprintf(err, errlen, "cpu backend: cannot start worker thread %d: %s", t, strerror(rc));
			c->n_threads = t;
			cpu_destroy(&c->be);
			return -rc;
		}
	}
	snprintf(c->be.info.name, sizeof c->be.info.name, "cpu");
	c->be.info.finish_works = 1;
	snprintf(c->be.info.model_name, sizeof c->be.info.model_name, "%s", m->name);
	snprintf(c->be.info.chat_template, sizeof c->be.info.chat_template, "%s", m->chat_template);
	snprintf(c->be.info.chat_system, sizeof c->be.info.chat_system, "%s", m->chat_system);
	c->be.info.vocab_size = c->vocab;
	c->be.info.max_ctx = ctx;
	c->be.info.bos_id = cfg->bos_id;
	c->be.info.eos_id = cfg->eos_id;
	c->be.info.deterministic = 1;          /* rl_cpu_qmatmul_det; attention is row-invariant */
	c->be.info.max_draft_rows = UINT32_MAX;   /* the LM head runs max_seqs rows at a time */
	c->be.info.prompt_cost = 1;            /* Q4_1/Q5_1 prompt steps decode bf16 tiles */
	c->be.info.vocab_blob = m->vocab_blob;
	c->be.info.vocab_blob_size = m->vocab_blob_size;
	*out = &c->be;
	return 0;
}
