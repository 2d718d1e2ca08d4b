/* cuda_host.c — host-side logic of the CUDA backend that needs no GPU (see cuda_host.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda/host/cuda_host.h"
#include "kernels/rl_sample.h"      /* rl_sample_mask_words, rl_sample_mask_any */

/* ---------------------------------------------------------------- buckets --------- */

int rl_cuda_host_parse_buckets(const char *s, uint32_t max_rows, uint32_t *out, uint32_t *n,
			       char *err, size_t errlen)
{
	*n = 0;
	if (!s) {
		/* Small steps (decodes) are launch-bound: a graph per power of two. Larger steps are
		 * GPU-bound, so eager launches hide behind them and padding up to the next power of two
		 * would cost more GEMM work than the launches; but chunked prefill fills the budget,
		 * so steps of exactly max_rows are common: they get a graph too, without padding. */
		uint32_t top = max_rows < 512 ? max_rows : 512;
		for (uint32_t b = 1; b <= top && *n < RL_CUDA_MAX_BUCKETS; b *= 2)
			out[(*n)++] = b;
		if (max_rows > out[*n - 1] && max_rows <= RL_BATCH_MAX_TOKENS)
			out[(*n)++] = max_rows;
		return 0;
	}
	if (!*s || !strcmp(s, "0"))
		return 0;
	const char *p = s;
	for (;;) {
		char *end;
		if (*p < '0' || *p > '9') {
			snprintf(err, errlen, "--cuda-graph-buckets: expected a list of token counts like 16,32,64, got '%s'", s);
			return -EINVAL;
		}
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (errno || v == 0 || v > max_rows) {
			snprintf(err, errlen, "--cuda-graph-buckets: %.*s is not in 1..%u (the token budget)",
				 (int)(end - p), p, max_rows);
			return -EINVAL;
		}
		if (*n && v <= out[*n - 1]) {
			snprintf(err, errlen, "--cuda-graph-buckets: sizes must be ascending and distinct ('%s')", s);
			return -EINVAL;
		}
		if (*n == RL_CUDA_MAX_BUCKETS) {
			snprintf(err, errlen, "--cuda-graph-buckets: at most %d sizes", RL_CUDA_MAX_BUCKETS);
			return -EINVAL;
		}
		out[(*n)++] = (uint32_t)v;
		if (!*end)
			return 0;
		if (*end != ',') {
			snprintf(err, errlen, "--cuda-graph-buckets: unexpected '%c' in '%s'", *end, s);
			return -EINVAL;
		}
		p = end + 1;
	}
}

int rl_cuda_host_pick_bucket(const uint32_t *buckets, uint32_t n, uint32_t n_tokens)
{
	uint32_t eager = rl_cuda_host_eager_rows(n_tokens);
	for (uint32_t i = 0; i < n; i++)
		if (buckets[i] >= n_tokens)
			return n_tokens > RL_CUDA_PAD_FREE && buckets[i] > eager + eager / RL_CUDA_PAD_FRAC ? -1 : (int)i;
	return -1;
}

uint32_t rl_cuda_host_eager_rows(uint32_t n_tokens)
{
	return (n_tokens + RL_CUDA_ROW_ALIGN - 1) / RL_CUDA_ROW_ALIGN * RL_CUDA_ROW_ALIGN;
}

/* ---------------------------------------------------------------- geometry -------- */

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

void rl_cuda_host_geom(struct rl_cuda_geom *g, uint32_t max_batch_tokens, uint32_t max_seqs,
		       uint32_t n_kv_blocks, uint32_t block_size, uint32_t max_ctx,
		       uint32_t n_heads, uint32_t n_kv_heads, uint32_t vocab, uint32_t target_ctas)
{
	uint32_t group = n_heads / n_kv_heads;
	memset(g, 0, sizeof *g);
	g->max_rows = rl_cuda_host_eager_rows(max_batch_tokens);
	g->max_seqs = max_seqs;
	g->max_samp = max_seqs;
	/* splitting only pays while the grid is small, so a few hundred partials suffice */
	g->max_parts = min_u32(1024, max_seqs * RL_CUDA_MAX_SPLITS);
	uint64_t per_seq = ((uint64_t)max_ctx + block_size - 1) / block_size;
	uint64_t bt = per_seq * max_seqs;
	g->max_bt = bt > (1u << 26) ? (1u << 26) : (uint32_t)bt;
	g->block_size = block_size;
	g->n_kv_blocks = n_kv_blocks;
	g->n_kv_heads = n_kv_heads;
	g->vocab = vocab;
	g->qt = group >= RL_CUDA_ATTN_QV ? 1 : RL_CUDA_ATTN_QV / group;
	g->target_ctas = target_ctas;
}

uint32_t rl_cuda_host_samp_cap(const struct rl_cuda_geom *g, uint32_t rows)
{
	return min_u32(rows, g->max_samp);
}

uint32_t rl_cuda_host_parts_cap(const struct rl_cuda_geom *g, uint32_t rows)
{
	return min_u32(g->max_parts, min_u32(rows, g->max_seqs) * RL_CUDA_MAX_SPLITS);
}

uint32_t rl_cuda_host_items_cap(const struct rl_cuda_geom *g, uint32_t rows)
{
	return (rows + g->qt - 1) / g->qt + min_u32(rows, g->max_seqs) + rl_cuda_host_parts_cap(g, rows);
}

/* ---------------------------------------------------------------- packing --------- */

static size_t arr(size_t *off, size_t bytes)
{
	size_t at = *off;
	*off = (at + bytes + 15) & ~(size_t)15;
	return at;
}

void rl_cuda_host_layout(const struct rl_cuda_geom *g, struct rl_cuda_layout *l)
{
	size_t off = (sizeof(struct rl_cuda_hdr) + 15) & ~(size_t)15, R = g->max_rows, S = g->max_seqs;
	l->tokens = arr(&off, R * 4);
	l->pos = arr(&off, R * 4);
	l->slot = arr(&off, R * 4);
	l->row_part = arr(&off, R * 4);
	l->row_nparts = arr(&off, R * 4);
	l->seq_bt = arr(&off, S * 4);
	l->items = arr(&off, (size_t)rl_cuda_host_items_cap(g, g->max_rows) * sizeof(struct rl_cuda_item));
	l->samp = arr(&off, (size_t)g->max_samp * sizeof(struct rl_cuda_samp));
	l->samp_row = arr(&off, (size_t)g->max_samp * 4);
	l->fi_qo = arr(&off, (R + 1) * 4);
	l->fi_indptr = arr(&off, (R + 1) * 4);
	l->fi_last = arr(&off, R * 4);
	l->bt = arr(&off, (size_t)g->max_bt * 4);    /* last: a step copies only what it uses */
	l->max_bytes = off;
}

struct rl_cuda_meta rl_cuda_host_meta_at(const struct rl_cuda_layout *l, const void *base)
{
	const char *b = base;
	return (struct rl_cuda_meta){
		.hdr = (const void *)b, .tokens = (const void *)(b + l->tokens),
		.pos = (const void *)(b + l->pos), .slot = (const void *)(b + l->slot),
		.row_part = (const void *)(b + l->row_part), .row_nparts = (const void *)(b + l->row_nparts),
		.seq_bt = (const void *)(b + l->seq_bt), .items = (const void *)(b + l->items),
		.samp = (const void *)(b + l->samp), .samp_row = (const void *)(b + l->samp_row),
		.bt = (const void *)(b + l->bt), .fi_qo = (const void *)(b + l->fi_qo),
		.fi_indptr = (const void *)(b + l->fi_indptr),
		.fi_last = (const void *)(b + l->fi_last),
	};
}

/* The same checks as the cpu backend's validate(): every index a kernel will follow. */
static int validate(const struct rl_cuda_geom *g, const struct rl_batch *b)
{
	if (b->block_size != g->block_size || b->n_seqs > g->max_seqs || b->n_prefill > b->n_seqs ||
	    b->n_tokens == 0 || b->n_tokens > g->max_rows)
		return -EINVAL;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		uint32_t need = (s->ctx_len + g->block_size - 1) / g->block_size;
		if (!s->q_len || s->q_start > b->n_tokens || s->q_len > b->n_tokens - s->q_start ||
		    s->ctx_len < s->q_len || s->n_blocks < need || (i >= b->n_prefill && s->q_len != 1))
			return -EINVAL;
		if (s->n_draft && (!s->sample || s->n_draft >= s->q_len || !s->draft_out))
			return -EINVAL;
		if (s->allow && !s->sample)
			return -EINVAL;
		for (uint32_t j = 0; s->allow && j <= s->n_draft; j++)   /* a mask a sampling row */
			if (!rl_sample_mask_any(s->allow + (size_t)j * rl_sample_mask_words(g->vocab), g->vocab))
				return -EINVAL;
		for (uint32_t k = 0; k < need; k++)
			if (s->block_table[k] >= g->n_kv_blocks)
				return -EINVAL;
	}
	for (uint32_t r = 0; r < b->n_tokens; r++) {
		if (b->tokens[r] >= g->vocab || b->row_seq[r] >= b->n_seqs)
			return -EINVAL;
		const struct rl_batch_seq *s = &b->seqs[b->row_seq[r]];
		if (r < s->q_start || r - s->q_start >= s->q_len ||
		    b->pos[r] != s->ctx_len - s->q_len + (r - s->q_start))
			return -EINVAL;
	}
	return 0;
}

int rl_cuda_host_pack(const struct rl_cuda_geom *g, const struct rl_cuda_layout *l,
		      const struct rl_batch *b, uint32_t rows, void *buf, size_t *bytes,
		      uint32_t *samp_seq, int32_t *samp_draft)
{
	int rc = validate(g, b);
	if (rc)
		return rc;
	if (rows < b->n_tokens || rows > g->max_rows)
		return -EINVAL;
	char *base = buf;
	struct rl_cuda_hdr *h = buf;
	int32_t *tokens = (int32_t *)(base + l->tokens), *pos = (int32_t *)(base + l->pos);
	int32_t *slot = (int32_t *)(base + l->slot), *row_part = (int32_t *)(base + l->row_part);
	int32_t *row_nparts = (int32_t *)(base + l->row_nparts), *seq_bt = (int32_t *)(base + l->seq_bt);
	struct rl_cuda_item *items = (struct rl_cuda_item *)(base + l->items);
	struct rl_cuda_samp *samp = (struct rl_cuda_samp *)(base + l->samp);
	int32_t *samp_row = (int32_t *)(base + l->samp_row), *bt = (int32_t *)(base + l->bt);
	uint32_t bs = g->block_size, n_bt = 0, n_items = 0, n_parts = 0, n_samp = 0;

	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		uint32_t need = (s->ctx_len + bs - 1) / bs;
		if (need > g->max_bt - n_bt)
			return -E2BIG;
		seq_bt[i] = (int32_t)n_bt;
		for (uint32_t k = 0; k < need; k++)
			bt[n_bt++] = (int32_t)s->block_table[k];
	}
	/* FlashInfer's CSR: the decode one for decode-only steps whose sequence i sits on row i,
	 * the prefill one for other steps whose sequences follow each other in row order */
	int decode_order = 1, row_order = 1;
	for (uint32_t i = 0, r = 0; i < b->n_seqs; r += b->seqs[i++].q_len) {
		decode_order &= b->seqs[i].q_start == i;
		row_order &= b->seqs[i].q_start == r;
	}
	uint32_t fi = b->n_prefill ? (row_order ? RL_CUDA_FI_CSR_PREFILL : RL_CUDA_FI_CSR_NONE)
				   : (decode_order ? RL_CUDA_FI_CSR_DECODE : RL_CUDA_FI_CSR_NONE);
	/* validate() bounds n_seqs by max_seqs and n_tokens <= rows, so every sequence has a request */
	uint32_t fi_batch = fi == RL_CUDA_FI_CSR_PREFILL ? rl_cuda_host_fi_batch(g, rows) : rows;
	if (fi != RL_CUDA_FI_CSR_NONE) {
		int32_t *fi_qo = (int32_t *)(base + l->fi_qo), *fi_indptr = (int32_t *)(base + l->fi_indptr);
		int32_t *fi_last = (int32_t *)(base + l->fi_last);
		for (uint32_t r = 0; r < fi_batch; r++) {
			int live = r < b->n_seqs;
			fi_qo[r] = live ? (int32_t)b->seqs[r].q_start : (int32_t)b->n_tokens;
			fi_indptr[r] = live ? seq_bt[r] : (int32_t)n_bt;
			fi_last[r] = live ? (int32_t)((b->seqs[r].ctx_len - 1) % bs + 1) : 0;
		}
		fi_qo[fi_batch] = (int32_t)b->n_tokens;
		fi_indptr[fi_batch] = (int32_t)n_bt;
	} else {
		fi_batch = 0;
	}
	for (uint32_t r = 0; r < rows; r++) {
		int live = r < b->n_tokens;
		tokens[r] = live ? (int32_t)b->tokens[r] : 0;
		pos[r] = live ? (int32_t)b->pos[r] : 0;
		if (live) {
			const struct rl_batch_seq *s = &b->seqs[b->row_seq[r]];
			slot[r] = (int32_t)(s->block_table[b->pos[r] / bs] * bs + b->pos[r] % bs);
		} else {
			slot[r] = -1;
		}
		row_part[r] = -1;
		row_nparts[r] = 0;
	}

	/* Split long decode rows over the KV only while the grid would underfill the GPU. In a
	 * deterministic step a row splits only at the fixed chunk boundaries (RL_CUDA_DET_CHUNK),
	 * one partial a chunk, which the kernels make bit-identical to not splitting: so the
	 * choice may follow the batch as it does here. */
	uint32_t n_decode = b->n_seqs - b->n_prefill, parts_cap = rl_cuda_host_parts_cap(g, rows);
	uint64_t base_items = 0;
	for (uint32_t i = 0; i < b->n_seqs; i++)
		base_items += (b->seqs[i].q_len + g->qt - 1) / g->qt;
	int may_split = n_decode && base_items * g->n_kv_heads < g->target_ctas;
	uint32_t n_det_items = 0;          /* split items of a deterministic step (<= parts_cap) */

	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		uint32_t nsplit = 1;
		const uint32_t nch = (s->ctx_len + RL_CUDA_DET_CHUNK - 1) / RL_CUDA_DET_CHUNK;
		if (b->deterministic && may_split && s->q_len == 1 && nch >= 2 && nch <= g->max_parts - n_parts) {
			/* items of `per` whole chunks; partial n_parts + c is chunk c */
			uint64_t want = (g->target_ctas + g->n_kv_heads - 1) / g->n_kv_heads;
			uint32_t ns = nch < want ? nch : (uint32_t)(want < 2 ? 2 : want);
			ns = ns < RL_CUDA_MAX_SPLITS ? ns : RL_CUDA_MAX_SPLITS;
			const uint32_t per = (nch + ns - 1) / ns;
			ns = (nch + per - 1) / per;
			if (ns <= parts_cap - n_det_items) {
				row_part[s->q_start] = (int32_t)n_parts;
				row_nparts[s->q_start] = (int32_t)nch;
				for (uint32_t k = 0; k < ns; k++) {
					uint32_t k1 = (k + 1) * per * RL_CUDA_DET_CHUNK;
					items[n_items++] = (struct rl_cuda_item){ (int32_t)i, (int32_t)s->q_start, 1,
						(int32_t)(k * per * RL_CUDA_DET_CHUNK), (int32_t)(k1 < s->ctx_len ? k1 : s->ctx_len),
						(int32_t)(n_parts + k * per) };
				}
				n_parts += nch;
				n_det_items += ns;
				nsplit = 0;            /* its items are made */
			}
		} else if (!b->deterministic && may_split && s->q_len == 1 && s->ctx_len >= 2 * RL_CUDA_SPLIT_CHUNK) {
			nsplit = s->ctx_len / RL_CUDA_SPLIT_CHUNK;
			uint64_t want = (g->target_ctas + g->n_kv_heads - 1) / g->n_kv_heads;
			if (nsplit > want)
				nsplit = (uint32_t)(want < 2 ? 2 : want);
			if (nsplit > RL_CUDA_MAX_SPLITS)
				nsplit = RL_CUDA_MAX_SPLITS;
			if (nsplit > parts_cap - n_parts)
				nsplit = parts_cap - n_parts >= 2 ? parts_cap - n_parts : 1;
		}
		if (nsplit == 0) {
			/* split above (deterministic) */
		} else if (nsplit > 1) {
			/* chunks in whole KV tiles, so every split but the last is full */
			uint32_t chunk = (s->ctx_len + nsplit - 1) / nsplit;
			chunk = (chunk + RL_CUDA_KV_TILE - 1) / RL_CUDA_KV_TILE * RL_CUDA_KV_TILE;
			nsplit = (s->ctx_len + chunk - 1) / chunk;
			row_part[s->q_start] = (int32_t)n_parts;
			row_nparts[s->q_start] = (int32_t)nsplit;
			for (uint32_t k = 0; k < nsplit; k++) {
				uint32_t k1 = (k + 1) * chunk < s->ctx_len ? (k + 1) * chunk : s->ctx_len;
				items[n_items++] = (struct rl_cuda_item){ (int32_t)i, (int32_t)s->q_start, 1,
					(int32_t)(k * chunk), (int32_t)k1, (int32_t)(n_parts + k) };
			}
			n_parts += nsplit;
		} else {
			for (uint32_t r = 0; r < s->q_len; r += g->qt) {
				uint32_t nr = s->q_len - r < g->qt ? s->q_len - r : g->qt;
				items[n_items++] = (struct rl_cuda_item){ (int32_t)i, (int32_t)(s->q_start + r),
					(int32_t)nr, 0, (int32_t)s->ctx_len, -1 };
			}
		}
		/* its draft rows (each keyed by the position it samples, as one-row decode is), then
		 * its last row */
		for (uint32_t k = 0; s->sample && k <= s->n_draft; k++) {
			if (n_samp == rl_cuda_host_samp_cap(g, rows))
				return -E2BIG;
			const int32_t row = (int32_t)(s->q_start + s->q_len - 1 - s->n_draft + k);
			samp_seq[n_samp] = i;
			samp_draft[n_samp] = k < s->n_draft ? (int32_t)k : -1;
			samp_row[n_samp] = row;
			samp[n_samp++] = (struct rl_cuda_samp){ s->sp.temperature, s->sp.top_p, s->sp.top_k,
				s->ctx_len - s->n_draft + k, s->sp.seed, row, -1 };
		}
	}
	for (uint32_t j = n_samp; j < rl_cuda_host_samp_cap(g, rows); j++)
		samp_row[j] = -1;
	*h = (struct rl_cuda_hdr){ b->n_tokens, rows, b->n_seqs, n_items, n_samp, n_parts, fi, fi_batch };
	*bytes = l->bt + (size_t)n_bt * 4;
	return 0;
}

uint32_t rl_cuda_host_pack_masks(const struct rl_cuda_geom *g, const struct rl_cuda_layout *l,
				 const struct rl_batch *b, void *buf, const uint32_t *samp_seq,
				 const int32_t *samp_draft, uint32_t *masks)
{
	const struct rl_cuda_hdr *h = buf;
	struct rl_cuda_samp *samp = (struct rl_cuda_samp *)((char *)buf + l->samp);
	const uint32_t words = rl_sample_mask_words(g->vocab);
	uint32_t n = 0;
	for (uint32_t j = 0; j < h->n_samp; j++) {
		const struct rl_batch_seq *s = &b->seqs[samp_seq[j]];
		if (!s->allow)
			continue;
		/* a draft row's mask is the draft's index; the last row's comes after the drafts' */
		const uint32_t k = samp_draft[j] >= 0 ? (uint32_t)samp_draft[j] : s->n_draft;
		memcpy(masks + (size_t)n * words, s->allow + (size_t)k * words, words * sizeof *masks);
		samp[j].mask = (int32_t)n++;
	}
	return n;
}

uint32_t rl_cuda_host_fi_batch(const struct rl_cuda_geom *g, uint32_t rows)
{
	return min_u32(rows, g->max_seqs);
}

void rl_cuda_host_fi_synth(const struct rl_cuda_geom *g, int mode, uint32_t rows, int32_t *qo,
			   int32_t *kv_indptr)
{
	uint32_t n = mode == RL_CUDA_FI_CSR_PREFILL ? rl_cuda_host_fi_batch(g, rows) : rows;
	for (uint32_t r = 0; r <= n; r++) {
		qo[r] = (int32_t)(r ? rows - n + r : 0);
		kv_indptr[r] = (int32_t)r;
	}
}

/* ---------------------------------------------------------------- conversion ------ */

void rl_cuda_host_convert(uint16_t *dst, const float *src, size_t n, enum rl_cuda_dtype dt)
{
	if (dt == RL_CUDA_FP16)
		for (size_t i = 0; i < n; i++)
			dst[i] = rl_f32_to_f16(src[i]);
	else
		for (size_t i = 0; i < n; i++)
			dst[i] = rl_f32_to_bf16(src[i]);
}
