/* rl_draft.c — the draft-model drafter (see rl_draft.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/spec/rl_draft.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/sched/rl_spec.h"
#include "runtime/backend/rl_backend.h"
#include "ipc/rl_clock.h"

#define NONE UINT32_MAX

/* One sequence's draft state: a slot, while the sequence lives */
struct dseq {
	uint32_t id;                   /* the scheduler's seq id, NONE when the slot is free */
	uint32_t n_kv;                 /* positions whose KV the draft model has written */
	uint32_t fed_from, n_fed;      /* drafts it fed (their KV is among n_kv), from this position */
	uint32_t fed[RL_SPEC_MAX_K];
	uint32_t *blocks, n_blocks;    /* its block table in the draft's pool */
	uint32_t k;                    /* this ask: drafts to make */
};

struct rl_draft {
	struct rl_backend *be;
	struct rl_kv *kv;              /* the draft's pool: allocation only, no prefix cache */
	uint32_t bs, max_seqs, max_tokens, pool_size, bt_cap;
	uint32_t *slot_of;             /* [pool_size] slot of each seq id, NONE if none */
	struct dseq *slots;            /* [max_seqs] */
	uint32_t *blkbuf;              /* [max_seqs * bt_cap] */
	uint32_t *tok, *pos, *row_seq; /* [max_tokens] one step's rows */
	struct rl_batch_seq *bseq;     /* [max_seqs] */
	uint32_t *b_slot, *b_ask;      /* [max_seqs] slot and ask of each batch seq */
	uint32_t *r_slot, *r_ask;      /* [max_seqs] the same for the first step, the roster */
	int32_t *out;                  /* [max_seqs] */
	struct rl_draft_stats st;
};

void rl_draft_destroy(struct rl_draft *d)
{
	if (!d)
		return;
	rl_kv_destroy(d->kv);
	free(d->slot_of);
	free(d->slots);
	free(d->blkbuf);
	free(d->tok);
	free(d->pos);
	free(d->row_seq);
	free(d->bseq);
	free(d->b_slot);
	free(d->b_ask);
	free(d->r_slot);
	free(d->r_ask);
	free(d->out);
	free(d);
}

int rl_draft_create(struct rl_backend *be, uint32_t n_blocks, uint32_t block_size, uint32_t max_seqs,
		    uint32_t max_tokens, uint32_t pool_size, uint32_t max_ctx, struct rl_draft **out)
{
	if (!be || !n_blocks || !block_size || !max_seqs || !max_tokens || !pool_size || !max_ctx)
		return -EINVAL;
	struct rl_draft *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->be = be;
	d->bs = block_size;
	d->max_seqs = max_seqs;
	d->max_tokens = max_tokens;
	d->pool_size = pool_size;
	d->bt_cap = (max_ctx + block_size - 1) / block_size;
	int rc = rl_kv_create(n_blocks, block_size, 0, &d->kv);
	d->slot_of = malloc(pool_size * sizeof *d->slot_of);
	d->slots = calloc(max_seqs, sizeof *d->slots);
	d->blkbuf = malloc((size_t)max_seqs * d->bt_cap * sizeof *d->blkbuf);
	d->tok = malloc(max_tokens * sizeof *d->tok);
	d->pos = malloc(max_tokens * sizeof *d->pos);
	d->row_seq = malloc(max_tokens * sizeof *d->row_seq);
	d->bseq = calloc(max_seqs, sizeof *d->bseq);
	d->b_slot = malloc(max_seqs * sizeof *d->b_slot);
	d->b_ask = malloc(max_seqs * sizeof *d->b_ask);
	d->r_slot = malloc(max_seqs * sizeof *d->r_slot);
	d->r_ask = malloc(max_seqs * sizeof *d->r_ask);
	d->out = malloc(max_seqs * sizeof *d->out);
	if (rc || !d->slot_of || !d->slots || !d->blkbuf || !d->tok || !d->pos || !d->row_seq || !d->bseq ||
	    !d->b_slot || !d->b_ask || !d->r_slot || !d->r_ask || !d->out) {
		rl_draft_destroy(d);
		return rc ? rc : -ENOMEM;
	}
	for (uint32_t i = 0; i < pool_size; i++)
		d->slot_of[i] = NONE;
	for (uint32_t i = 0; i < max_seqs; i++) {
		d->slots[i].id = NONE;
		d->slots[i].blocks = d->blkbuf + (size_t)i * d->bt_cap;
	}
	*out = d;
	return 0;
}

void rl_draft_forget(struct rl_draft *d, uint32_t seq_id)
{
	if (seq_id >= d->pool_size || d->slot_of[seq_id] == NONE)
		return;
	struct dseq *sl = &d->slots[d->slot_of[seq_id]];
	while (sl->n_blocks)                   /* last first (rl_kv_unref) */
		rl_kv_unref(d->kv, sl->blocks[--sl->n_blocks]);
	sl->id = NONE;
	d->slot_of[seq_id] = NONE;
}

static struct dseq *slot_for(struct rl_draft *d, uint32_t seq_id)
{
	if (seq_id >= d->pool_size)
		return NULL;
	if (d->slot_of[seq_id] != NONE)
		return &d->slots[d->slot_of[seq_id]];
	for (uint32_t i = 0; i < d->max_seqs; i++)
		if (d->slots[i].id == NONE) {
			d->slots[i] = (struct dseq){ .id = seq_id, .blocks = d->slots[i].blocks };
			d->slot_of[seq_id] = i;
			return &d->slots[i];
		}
	return NULL;
}

/* Blocks for n_tok positions; -ENOMEM when the draft's pool is out */
static int grow(struct rl_draft *d, struct dseq *sl, uint32_t n_tok)
{
	const uint32_t need = (n_tok + d->bs - 1) / d->bs;
	if (need > d->bt_cap)
		return -E2BIG;
	while (sl->n_blocks < need) {
		const int64_t b = rl_kv_alloc(d->kv);
		if (b < 0)
			return (int)b;
		sl->blocks[sl->n_blocks++] = (uint32_t)b;
	}
	return 0;
}

/* Adds a batch seq for slot (of ask): rows tokens src[] at positions start.., sampling at the
 * last row when sample */
static void add_seq(struct rl_draft *d, struct rl_batch *b, uint32_t slot, uint32_t ask, uint32_t start,
		    uint32_t rows, const uint32_t *src, int sample)
{
	struct dseq *sl = &d->slots[slot];
	struct rl_batch_seq *q = &d->bseq[b->n_seqs];
	*q = (struct rl_batch_seq){ .q_start = b->n_tokens, .q_len = rows, .ctx_len = start + rows,
		.n_blocks = sl->n_blocks, .block_table = sl->blocks, .sample = sample != 0, .seq_id = slot,
		.sp = { .temperature = 0, .top_p = 1 }, .next_token = UINT32_MAX };
	for (uint32_t r = 0; r < rows; r++) {
		d->tok[b->n_tokens + r] = src[r];
		d->pos[b->n_tokens + r] = start + r;
		d->row_seq[b->n_tokens + r] = b->n_seqs;
	}
	d->b_slot[b->n_seqs] = slot;
	d->b_ask[b->n_seqs] = ask;
	b->n_tokens += rows;
	b->n_seqs++;
}

static int run(struct rl_draft *d, struct rl_batch *b)
{
	const uint64_t t0 = rl_now_ns();
	int rc = rl_backend_launch(d->be, b);
	if (!rc)
		rc = rl_backend_finish(d->be, d->out);
	d->st.steps++;
	d->st.rows += b->n_tokens;
	d->st.ns += rl_now_ns() - t0;
	return rc;
}

static int propose(struct rl_draft *d, struct rl_draft_ask *asks, uint32_t n)
{
	struct rl_batch b = { .block_size = d->bs, .tokens = d->tok, .pos = d->pos, .row_seq = d->row_seq,
			      .seqs = d->bseq };
	/* step 1: each sequence's KV brought up to date, and its first draft */
	for (uint32_t i = 0; i < n && b.n_seqs < d->max_seqs; i++) {
		struct rl_draft_ask *a = &asks[i];
		a->n_out = 0;
		struct dseq *sl = slot_for(d, a->seq_id);
		if (!sl || !a->len)
			continue;
		/* its KV holds until the first draft it fed that the sequence did not keep; the
		 * last token is always fed again (its logits give the first draft) */
		uint32_t v = sl->n_kv;
		for (uint32_t j = 0; j < sl->n_fed && sl->fed_from + j < v; j++)
			if (sl->fed_from + j >= a->len || a->tokens[sl->fed_from + j] != sl->fed[j]) {
				v = sl->fed_from + j;
				break;
			}
		v = v < a->len - 1 ? v : a->len - 1;
		sl->n_kv = v;
		sl->n_fed = 0;
		uint32_t rows = a->len - v, k = a->k < RL_SPEC_MAX_K ? a->k : RL_SPEC_MAX_K;
		if (rows > d->max_tokens - b.n_tokens) {   /* catching up over several asks */
			rows = d->max_tokens - b.n_tokens;
			k = 0;
		}
		if (!rows)
			continue;
		if (k && grow(d, sl, a->len + k - 1))
			k = 0;
		if (!k && grow(d, sl, v + rows)) {
			rl_draft_forget(d, a->seq_id);
			continue;
		}
		sl->k = k;
		add_seq(d, &b, d->slot_of[a->seq_id], i, v, rows, a->tokens + v, k > 0);
	}
	if (!b.n_seqs)
		return 0;
	b.n_prefill = b.n_seqs;
	int rc = run(d, &b);
	if (rc)
		return rc;
	const uint32_t n1 = b.n_seqs;
	for (uint32_t s = 0; s < n1; s++) {
		struct dseq *sl = &d->slots[d->b_slot[s]];
		struct rl_draft_ask *a = &asks[d->b_ask[s]];
		sl->n_kv = d->bseq[s].ctx_len;
		if (sl->k && d->out[s] >= 0) {
			a->out[0] = (uint32_t)d->out[s];
			a->n_out = 1;
			sl->fed_from = a->len;
		}
	}
	/* then one row per further draft: feed draft j - 1 at position len + j - 1 (the roster:
	 * step 1's seqs, since each step's b_slot/b_ask describe that step only) */
	memcpy(d->r_slot, d->b_slot, n1 * sizeof *d->r_slot);
	memcpy(d->r_ask, d->b_ask, n1 * sizeof *d->r_ask);
	for (uint32_t j = 1; j < RL_SPEC_MAX_K; j++) {
		struct rl_batch s = { .block_size = d->bs, .tokens = d->tok, .pos = d->pos, .row_seq = d->row_seq,
				      .seqs = d->bseq };
		for (uint32_t t = 0; t < n1; t++) {
			const uint32_t si = d->r_slot[t], ai = d->r_ask[t];
			struct dseq *sl = &d->slots[si];
			struct rl_draft_ask *a = &asks[ai];
			if (sl->k <= j || a->n_out != j)
				continue;
			add_seq(d, &s, si, ai, a->len + j - 1, 1, &a->out[j - 1], 1);
		}
		if (!s.n_seqs)
			break;
		if ((rc = run(d, &s)))
			return rc;
		for (uint32_t t = 0; t < s.n_seqs; t++) {
			struct dseq *sl = &d->slots[d->b_slot[t]];
			struct rl_draft_ask *a = &asks[d->b_ask[t]];
			sl->fed[sl->n_fed++] = a->out[j - 1];
			sl->n_kv = a->len + j;
			if (d->out[t] < 0) {
				sl->k = 0;
				continue;
			}
			a->out[j] = (uint32_t)d->out[t];
			a->n_out = j + 1;
		}
	}
	return 0;
}

int rl_draft_propose(struct rl_draft *d, struct rl_draft_ask *asks, uint32_t n)
{
	const int rc = propose(d, asks, n);
	if (rc)                         /* drafts of a failed step are not the model's */
		for (uint32_t i = 0; i < n; i++)
			asks[i].n_out = 0;
	return rc;
}

void rl_draft_get_stats(const struct rl_draft *d, struct rl_draft_stats *st)
{
	*st = d->st;
}
