/* test_cuda_host.c — the CUDA backend's host-side logic, on the CPU: graph bucket parsing and
 * choice, per-bucket capacities and row padding, metadata packing (every row, item, partial
 * and sampling row checked against the batch it came from, and FlashInfer's decode CSR; in a
 * deterministic step, splits at the fixed chunks only) and fp32 -> bf16/fp16 rounding
 * against independent references (exact nearest-even search; the compiler's _Float16).
 * Tests: runtime/cuda/host (cuda_host), kernels/rl_half.h.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include "kernels/rl_sample.h"
#include "runtime/cuda/host/cuda_host.h"
#include "tests/rl_test.h"

static uint64_t rng_state = 0x1234567;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
	return rng_state;
}

static void test_parse_buckets(void)
{
	uint32_t b[RL_CUDA_MAX_BUCKETS], n;
	char err[256];
	CHECK(rl_cuda_host_parse_buckets(NULL, 2048, b, &n, err, sizeof err) == 0);
	CHECK(n == 11 && b[0] == 1 && b[9] == 512 && b[10] == 2048);   /* + the full budget */
	CHECK(rl_cuda_host_parse_buckets(NULL, 100, b, &n, err, sizeof err) == 0);
	CHECK(n == 8 && b[6] == 64 && b[7] == 100);
	CHECK(rl_cuda_host_parse_buckets(NULL, 512, b, &n, err, sizeof err) == 0 && n == 10 && b[9] == 512);
	CHECK(rl_cuda_host_parse_buckets(NULL, 8200, b, &n, err, sizeof err) == 0 && n == 10);   /* too big */
	CHECK(rl_cuda_host_parse_buckets("16,32,64,512", 512, b, &n, err, sizeof err) == 0);
	CHECK(n == 4 && b[0] == 16 && b[3] == 512);
	CHECK(rl_cuda_host_parse_buckets("", 512, b, &n, err, sizeof err) == 0 && n == 0);
	CHECK(rl_cuda_host_parse_buckets("0", 512, b, &n, err, sizeof err) == 0 && n == 0);
	const char *bad[] = { "16,8", "16,16", "1024", "a", "16,", ",16", "16;32", "-4", "16,0" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		err[0] = 0;
		CHECKF(rl_cuda_host_parse_buckets(bad[i], 512, b, &n, err, sizeof err) == -EINVAL, "%s", bad[i]);
		CHECKF(err[0] != 0, "no reason for %s", bad[i]);
	}
}

static void test_pick_bucket(void)
{
	uint32_t b[] = { 1, 2, 4, 8, 16, 64 };
	CHECK(rl_cuda_host_pick_bucket(b, 6, 1) == 0);
	CHECK(rl_cuda_host_pick_bucket(b, 6, 3) == 2);
	CHECK(rl_cuda_host_pick_bucket(b, 6, 16) == 4);
	CHECK(rl_cuda_host_pick_bucket(b, 6, 17) == 5);
	CHECK(rl_cuda_host_pick_bucket(b, 6, 65) == -1);
	CHECK(rl_cuda_host_pick_bucket(b, 0, 1) == -1);
	/* above 512 tokens a step pads at most 1/8 of its rows, else runs eagerly */
	uint32_t big[] = { 256, 512, 2048 };
	CHECK(rl_cuda_host_pick_bucket(big, 3, 300) == 1);          /* 300 -> 512: small steps always pad */
	CHECK(rl_cuda_host_pick_bucket(big, 3, 512) == 1);
	CHECK(rl_cuda_host_pick_bucket(big, 3, 513) == -1);         /* 520 eager rows, not 2048 */
	CHECK(rl_cuda_host_pick_bucket(big, 3, 1800) == -1);        /* 2048 > 1800 + 225 */
	CHECK(rl_cuda_host_pick_bucket(big, 3, 1825) == 2);         /* 1832 + 229 >= 2048 */
	CHECK(rl_cuda_host_pick_bucket(big, 3, 2048) == 2);
	CHECK(rl_cuda_host_eager_rows(65) == 72 && rl_cuda_host_eager_rows(72) == 72);
	CHECK(rl_cuda_host_eager_rows(1) == 8);
}

static void test_caps(void)
{
	struct rl_cuda_geom g;
	rl_cuda_host_geom(&g, 500, 64, 1000, 16, 4096, 32, 8, 1000, 264);
	CHECK(g.max_rows == 504);                       /* rounded up to ROW_ALIGN */
	CHECK(g.qt == 8);                               /* group 4: 8 rows x 4 heads = 32 vectors */
	CHECK(g.max_bt == 64 * 256);
	CHECK(rl_cuda_host_samp_cap(&g, 1) == 1 && rl_cuda_host_samp_cap(&g, 256) == 64);
	CHECK(rl_cuda_host_parts_cap(&g, 1) == RL_CUDA_MAX_SPLITS);
	CHECK(rl_cuda_host_parts_cap(&g, 504) == g.max_parts);
	CHECK(rl_cuda_host_items_cap(&g, 1) == 1 + 1 + RL_CUDA_MAX_SPLITS);
	struct rl_cuda_geom g2;
	rl_cuda_host_geom(&g2, 64, 8, 100, 16, 512, 8, 8, 100, 264);
	CHECK(g2.qt == RL_CUDA_ATTN_QV);                /* no GQA: 32 rows */
	rl_cuda_host_geom(&g2, 64, 8, 100, 16, 512, 64, 4, 100, 264);
	CHECK(g2.qt == 2);                              /* group 16 */
	rl_cuda_host_geom(&g2, 64, 8, 100, 16, 512, 64, 1, 100, 264);
	CHECK(g2.qt == 1);                              /* group 64 */
}

/* A random valid batch: n_pf prefill chunks over random cached prefixes, then n_dec decode rows,
 * block tables of distinct random blocks. */
struct tb {
	struct rl_batch b;
	struct rl_batch_seq seqs[64];
	uint32_t tokens[4096], pos[4096], row_seq[4096], bt[64][512];
	int32_t draft_out[64][16];
};

static void make_batch(struct tb *t, uint32_t n_pf, uint32_t n_dec, uint32_t max_q, uint32_t max_ctx,
		       uint32_t bs, uint32_t n_blocks, uint32_t vocab)
{
	memset(t, 0, sizeof *t);
	uint32_t row = 0;
	for (uint32_t i = 0; i < n_pf + n_dec; i++) {
		struct rl_batch_seq *s = &t->seqs[i];
		s->q_len = i < n_pf ? 1 + rnd() % max_q : 1;
		s->ctx_len = s->q_len + rnd() % max_ctx;  /* cached prefix below max_ctx */
		s->q_start = row;
		s->n_blocks = (s->ctx_len + bs - 1) / bs;
		for (uint32_t k = 0; k < s->n_blocks; k++)
			t->bt[i][k] = (uint32_t)(rnd() % n_blocks);
		s->block_table = t->bt[i];
		s->sample = (rnd() & 1) || i >= n_pf;
		/* some multi-row seqs that sample verify drafts (speculative decoding) */
		if (i < n_pf && s->sample && s->q_len > 1 && rnd() % 3 == 0) {
			s->n_draft = 1 + rnd() % (s->q_len - 1 < 15 ? s->q_len - 1 : 15);
			s->draft_out = t->draft_out[i];
		}
		s->seq_id = i;
		s->sp = (struct rl_sampling){ 0.5f + i, 0.9f, i, 0, 1000 + i };
		for (uint32_t r = 0; r < s->q_len; r++, row++) {
			t->tokens[row] = (uint32_t)(rnd() % vocab);
			t->pos[row] = s->ctx_len - s->q_len + r;
			t->row_seq[row] = i;
		}
	}
	t->b = (struct rl_batch){ row, n_pf + n_dec, n_pf, bs, t->tokens, t->pos, t->row_seq, t->seqs, 0 };
}

/* Checks the packed image against the batch: the invariants the kernels rely on. */
static void check_packed(const struct rl_cuda_geom *g, const struct rl_cuda_layout *l, const struct tb *t,
			 const void *img, uint32_t rows, size_t bytes, const uint32_t *samp_seq, const int32_t *samp_draft)
{
	const struct rl_batch *b = &t->b;
	struct rl_cuda_meta m = rl_cuda_host_meta_at(l, img);
	CHECK(m.hdr->n_tokens == b->n_tokens && m.hdr->n_rows == rows && m.hdr->n_seqs == b->n_seqs);
	CHECK(m.hdr->n_items <= rl_cuda_host_items_cap(g, rows));
	/* a deterministic step's partials are chunks (up to the geometry's), not splits */
	CHECK(m.hdr->n_parts <= (b->deterministic ? g->max_parts : rl_cuda_host_parts_cap(g, rows)));
	CHECK(m.hdr->n_samp <= rl_cuda_host_samp_cap(g, rows));
	CHECK(bytes <= l->max_bytes && bytes >= l->bt);
	for (uint32_t r = 0; r < rows; r++) {
		if (r >= b->n_tokens) {                 /* padding rows write nowhere */
			CHECK(m.tokens[r] == 0 && m.pos[r] == 0 && m.slot[r] == -1 && m.row_part[r] == -1);
			continue;
		}
		const struct rl_batch_seq *s = &b->seqs[b->row_seq[r]];
		CHECK(m.tokens[r] == (int32_t)b->tokens[r] && m.pos[r] == (int32_t)b->pos[r]);
		CHECK(m.slot[r] == (int32_t)(s->block_table[b->pos[r] / g->block_size] * g->block_size +
					     b->pos[r] % g->block_size));
		CHECK((size_t)(m.bt + m.seq_bt[b->row_seq[r]] + b->pos[r] / g->block_size) < (size_t)(m.bt) + bytes);
		CHECK(m.bt[m.seq_bt[b->row_seq[r]] + b->pos[r] / g->block_size] ==
		      (int32_t)s->block_table[b->pos[r] / g->block_size]);
	}
	/* every row's keys [0, pos] are covered by its items' disjoint ranges, all counted */
	static uint32_t cover[4096];
	memset(cover, 0, sizeof cover);
	uint32_t parts_seen = 0;
	for (uint32_t k = 0; k < m.hdr->n_items; k++) {
		const struct rl_cuda_item *it = &m.items[k];
		REQUIRE(it->seq >= 0 && (uint32_t)it->seq < b->n_seqs);
		const struct rl_batch_seq *s = &b->seqs[it->seq];
		CHECK(it->nrows >= 1 && (uint32_t)it->nrows <= g->qt);
		CHECK((uint32_t)it->row0 >= s->q_start && (uint32_t)(it->row0 + it->nrows) <= s->q_start + s->q_len);
		CHECK(it->kv0 >= 0 && it->kv0 < it->kv1 && (uint32_t)it->kv1 <= s->ctx_len);
		if (it->part >= 0 && b->deterministic) {
			/* whole fixed chunks from a chunk boundary, partial row_part + chunk index each */
			CHECK(it->nrows == 1 && it->kv0 % RL_CUDA_DET_CHUNK == 0 &&
			      (it->kv1 % RL_CUDA_DET_CHUNK == 0 || (uint32_t)it->kv1 == s->ctx_len));
			CHECK(it->part == m.row_part[it->row0] + it->kv0 / RL_CUDA_DET_CHUNK);
			CHECK(m.row_nparts[it->row0] == (int32_t)((s->ctx_len + RL_CUDA_DET_CHUNK - 1) / RL_CUDA_DET_CHUNK));
			parts_seen += (uint32_t)(it->kv1 - it->kv0 + RL_CUDA_DET_CHUNK - 1) / RL_CUDA_DET_CHUNK;
		} else if (it->part >= 0) {
			CHECK(it->nrows == 1 && it->kv0 % RL_CUDA_KV_TILE == 0);
			CHECK(it->part >= m.row_part[it->row0] && it->part < m.row_part[it->row0] + m.row_nparts[it->row0]);
			parts_seen++;
		} else {
			CHECK(m.row_part[it->row0] == -1);
		}
		for (int r = it->row0; r < it->row0 + it->nrows; r++) {
			int end = it->kv1 < (int)b->pos[r] + 1 ? it->kv1 : (int)b->pos[r] + 1;
			cover[r] += end > it->kv0 ? (uint32_t)(end - it->kv0) : 0;
			if (it->part >= 0 && !b->deterministic && k + 1 < m.hdr->n_items && m.items[k + 1].row0 == it->row0 &&
			    m.items[k + 1].part == it->part + 1)
				CHECK(m.items[k + 1].kv0 == it->kv1);   /* splits are contiguous */
		}
	}
	CHECK(parts_seen == m.hdr->n_parts);
	for (uint32_t r = 0; r < b->n_tokens; r++) {
		CHECKF(cover[r] == b->pos[r] + 1, "row %u covers %u keys, wants %u", r, cover[r], b->pos[r] + 1);
	}
	uint32_t j = 0;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *s = &b->seqs[i];
		if (!s->sample)
			continue;
		/* its draft rows, each keyed by the position it samples, then its last row */
		for (uint32_t k = 0; k <= s->n_draft; k++) {
			REQUIRE(j < m.hdr->n_samp);
			const int32_t row = (int32_t)(s->q_start + s->q_len - 1 - s->n_draft + k);
			CHECK(samp_seq[j] == i && m.samp_row[j] == row && samp_draft[j] == (k < s->n_draft ? (int32_t)k : -1));
			CHECK(m.samp[j].row == m.samp_row[j] && m.samp[j].position == s->ctx_len - s->n_draft + k);
			CHECK(m.samp[j].seed == s->sp.seed && m.samp[j].top_k == s->sp.top_k &&
			      m.samp[j].temperature == s->sp.temperature && m.samp[j].top_p == s->sp.top_p);
			j++;
		}
	}
	CHECK(j == m.hdr->n_samp);
	for (; j < rl_cuda_host_samp_cap(g, rows); j++)
		CHECK(m.samp_row[j] == -1);
	/* FlashInfer's CSR (kernels/rl_cuda_fi.h): the decode one exactly for decode-only steps
	 * with sequence i on row i, the prefill one exactly for other steps whose sequences sit in
	 * row order. Request r's pages are sequence r's block table and the length FlashInfer
	 * derives from them (paged_kv_t::get_length) is its context; prefill requests' rows are its
	 * query rows; padding requests are empty */
	int decode_order = 1, row_order = 1;
	for (uint32_t i = 0, r = 0; i < b->n_seqs; r += b->seqs[i++].q_len) {
		decode_order &= b->seqs[i].q_start == i;
		row_order &= b->seqs[i].q_start == r;
	}
	uint32_t want = b->n_prefill ? (row_order ? RL_CUDA_FI_CSR_PREFILL : RL_CUDA_FI_CSR_NONE)
				     : (decode_order ? RL_CUDA_FI_CSR_DECODE : RL_CUDA_FI_CSR_NONE);
	CHECKF(m.hdr->fi_csr == want, "FlashInfer CSR %u, want %u", m.hdr->fi_csr, want);
	uint32_t nreq = m.hdr->fi_batch;
	if (want == RL_CUDA_FI_CSR_DECODE)
		CHECK(nreq == rows);
	if (want == RL_CUDA_FI_CSR_PREFILL)
		CHECK(nreq == (rows < g->max_seqs ? rows : g->max_seqs) && nreq >= b->n_seqs);
	if (want != RL_CUDA_FI_CSR_NONE) {
		CHECK(m.fi_indptr[0] == 0 && m.fi_qo[0] == 0 && m.fi_qo[nreq] == (int32_t)b->n_tokens);
		for (uint32_t r = 0; r < nreq; r++) {
			int32_t np = m.fi_indptr[r + 1] - m.fi_indptr[r], nq = m.fi_qo[r + 1] - m.fi_qo[r];
			REQUIRE(np >= 0 && nq >= 0);
			uint32_t len = np ? (uint32_t)(np - 1) * g->block_size + (uint32_t)m.fi_last[r] : 0;
			if (r >= b->n_seqs) {
				CHECK(np == 0 && len == 0 && nq == 0);
				continue;
			}
			const struct rl_batch_seq *s = &b->seqs[r];
			CHECKF(len == s->ctx_len, "request %u: FlashInfer length %u, context %u", r, len, s->ctx_len);
			CHECK(m.fi_last[r] >= 1 && (uint32_t)m.fi_last[r] <= g->block_size);
			CHECK(m.fi_qo[r] == (int32_t)s->q_start && (uint32_t)nq == s->q_len);
			for (int32_t k = 0; k < np; k++)
				CHECK(m.bt[m.fi_indptr[r] + k] == (int32_t)s->block_table[k]);
		}
		CHECK(l->bt + (size_t)m.fi_indptr[nreq] * 4 <= bytes);   /* the copy carries every page */
	} else {
		CHECK(nreq == 0);
	}
}

static void test_pack_random(void)
{
	static struct tb t;
	struct rl_cuda_geom g;
	struct rl_cuda_layout l;
	rl_cuda_host_geom(&g, 1024, 64, 5000, 16, 4096, 8, 2, 1000, 264);
	g.max_samp += 256;                 /* room for verification rows, as the backend makes */
	rl_cuda_host_layout(&g, &l);
	char *img = malloc(l.max_bytes);
	uint32_t samp_seq[512];
	int32_t samp_draft[512];
	for (int it = 0; it < 300; it++) {
		uint32_t n_pf = rnd() % 4, n_dec = rnd() % 20 + (n_pf ? 0 : 1);
		make_batch(&t, n_pf, n_dec, 100, it % 3 ? 64 : 4096, 16, 5000, 1000);
		if (it % 5 == 4 && n_pf >= 2) {        /* sequences out of row order: no FlashInfer CSR */
			struct rl_batch_seq s0 = t.seqs[0];
			t.seqs[0] = t.seqs[1];
			t.seqs[1] = s0;
			for (uint32_t r = 0; r < t.b.n_tokens; r++)
				t.row_seq[r] = t.row_seq[r] < 2 ? 1 - t.row_seq[r] : t.row_seq[r];
		}
		uint32_t rows = t.b.n_tokens + (uint32_t)(rnd() % 8);
		t.b.deterministic = it % 4 == 3;
		memset(img, 0x5a, l.max_bytes);            /* poison: every read field must be written */
		size_t bytes = 0;
		int rc = rl_cuda_host_pack(&g, &l, &t.b, rows, img, &bytes, samp_seq, samp_draft);
		REQUIRE(rc == 0);
		check_packed(&g, &l, &t, img, rows, bytes, samp_seq, samp_draft);
		if (rl_t_failed_now)
			return;
	}
	free(img);
}

static void test_pack_splits(void)
{
	static struct tb t;
	struct rl_cuda_geom g;
	struct rl_cuda_layout l;
	rl_cuda_host_geom(&g, 64, 8, 5000, 16, 8192, 32, 8, 1000, 264);
	rl_cuda_host_layout(&g, &l);
	char *img = malloc(l.max_bytes);
	uint32_t samp_seq[512];
	int32_t samp_draft[512];
	size_t bytes;
	/* one decode row with a long context: split into several partials */
	make_batch(&t, 0, 1, 1, 2, 16, 5000, 1000);
	t.seqs[0].ctx_len = 5000; t.pos[0] = 4999;
	t.seqs[0].n_blocks = (5000 + 15) / 16;
	for (uint32_t k = 0; k < t.seqs[0].n_blocks; k++)
		t.bt[0][k] = k;
	REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, 1, img, &bytes, samp_seq, samp_draft) == 0);
	struct rl_cuda_meta m = rl_cuda_host_meta_at(&l, img);
	CHECK(m.hdr->n_parts > 1 && m.hdr->n_items == m.hdr->n_parts);
	CHECK(m.row_nparts[0] == (int32_t)m.hdr->n_parts && m.row_part[0] == 0);
	check_packed(&g, &l, &t, img, 1, bytes, samp_seq, samp_draft);
	/* the same row in a deterministic step: cut at the fixed chunks only, a partial each (20 of
	 * 256 keys), in at most RL_CUDA_MAX_SPLITS items of whole chunks (10 of 2 here) */
	t.b.deterministic = 1;
	REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, 1, img, &bytes, samp_seq, samp_draft) == 0);
	CHECKF(m.hdr->n_parts == 20 && m.hdr->n_items == 10 && m.row_part[0] == 0 && m.row_nparts[0] == 20,
	       "%u partials, %u items", m.hdr->n_parts, m.hdr->n_items);
	CHECK(m.items[9].kv0 == 18 * RL_CUDA_DET_CHUNK && m.items[9].kv1 == 5000 && m.items[9].part == 18);
	check_packed(&g, &l, &t, img, 1, bytes, samp_seq, samp_draft);
	t.b.deterministic = 0;
	/* a short context is never split */
	t.seqs[0].ctx_len = 300; t.pos[0] = 299;
	REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, 1, img, &bytes, samp_seq, samp_draft) == 0);
	CHECK(m.hdr->n_parts == 0 && m.hdr->n_items == 1 && m.row_part[0] == -1);
	/* enough decode rows to fill the GPU: no split even for long contexts */
	make_batch(&t, 0, 8, 1, 2, 16, 5000, 1000);
	rl_cuda_host_geom(&g, 64, 8, 5000, 16, 8192, 32, 8, 1000, 16);
	rl_cuda_host_layout(&g, &l);
	for (uint32_t i = 0; i < 8; i++) {
		t.seqs[i].ctx_len = 3000; t.pos[i] = 2999; t.seqs[i].n_blocks = 188;
		for (uint32_t k = 0; k < 188; k++)
			t.bt[i][k] = k;
	}
	REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, 8, img, &bytes, samp_seq, samp_draft) == 0);
	m = rl_cuda_host_meta_at(&l, img);
	CHECK(m.hdr->n_parts == 0 && m.hdr->n_items == 8);
	free(img);
}

static void test_pack_rejects(void)
{
	static struct tb t;
	struct rl_cuda_geom g;
	struct rl_cuda_layout l;
	rl_cuda_host_geom(&g, 64, 8, 100, 16, 512, 8, 2, 1000, 264);
	rl_cuda_host_layout(&g, &l);
	char *img = malloc(l.max_bytes);
	uint32_t samp_seq[512];
	int32_t samp_draft[512];
	size_t bytes;
	make_batch(&t, 1, 2, 10, 100, 16, 100, 1000);
	REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == 0);
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens - 1, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, 65, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	t.tokens[0] = 1000;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	t.tokens[0] = 1;
	t.bt[1][0] = 100;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	t.bt[1][0] = 0;
	t.pos[t.b.n_tokens - 1]++;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	t.pos[t.b.n_tokens - 1]--;
	t.seqs[2].q_len = 2;                            /* decode rows are one token */
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	t.seqs[2].q_len = 1;
	t.b.block_size = 32;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	free(img);
}

/* Constraint masks with drafts: a verifying seq's allow holds n_draft + 1 masks, and each of its
 * sampling rows gets its own (draft row k mask k, the last row mask n_draft); a seq without
 * one gets none; a mask without a bit refuses the batch. */
static void test_pack_masks_with_drafts(void)
{
	static struct tb t;
	struct rl_cuda_geom g;
	struct rl_cuda_layout l;
	const uint32_t vocab = 1000, words = rl_sample_mask_words(vocab);
	rl_cuda_host_geom(&g, 1024, 64, 5000, 16, 4096, 8, 2, vocab, 264);
	g.max_samp += 256;
	rl_cuda_host_layout(&g, &l);
	char *img = malloc(l.max_bytes);
	uint32_t samp_seq[512], *masks = malloc((size_t)g.max_samp * words * 4);
	int32_t samp_draft[512];
	static uint32_t allow[64][17][(1000 + 31) / 32];
	uint32_t checked = 0;
	for (int it = 0; it < 50; it++) {
		make_batch(&t, 3, 5, 40, 64, 16, 5000, vocab);
		for (uint32_t i = 0; i < t.b.n_seqs; i++) {
			t.seqs[i].allow = NULL;
			if (!t.seqs[i].sample || rnd() % 2)
				continue;
			for (uint32_t k = 0; k <= t.seqs[i].n_draft; k++)   /* mask k: token k*10+i alone */
				for (uint32_t w = 0; w < words; w++)
					allow[i][k][w] = w == (k * 10 + i) / 32 ? 1u << ((k * 10 + i) % 32) : 0;
			t.seqs[i].allow = allow[i][0];
		}
		size_t bytes;
		REQUIRE(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == 0);
		const uint32_t n = rl_cuda_host_pack_masks(&g, &l, &t.b, img, samp_seq, samp_draft, masks);
		const struct rl_cuda_meta m = rl_cuda_host_meta_at(&l, img);
		uint32_t want = 0;
		for (uint32_t j = 0; j < m.hdr->n_samp; j++) {
			const struct rl_batch_seq *s = &t.seqs[samp_seq[j]];
			if (!s->allow) {
				CHECK(m.samp[j].mask == -1);
				continue;
			}
			const uint32_t k = samp_draft[j] >= 0 ? (uint32_t)samp_draft[j] : s->n_draft, tok = k * 10 + samp_seq[j];
			REQUIRE(m.samp[j].mask >= 0 && (uint32_t)m.samp[j].mask < n);
			const uint32_t *mk = masks + (size_t)m.samp[j].mask * words;
			CHECKF(mk[tok / 32] == 1u << (tok % 32), "sampling row %u (draft %d): its mask is not mask %u", j, samp_draft[j], k);
			want++;
		}
		CHECK(n == want);
		checked += want;
	}
	/* a mask that allows nothing: refused */
	make_batch(&t, 0, 1, 1, 64, 16, 5000, vocab);
	memset(allow[0], 0, sizeof allow[0]);
	allow[0][0][0] = 1;
	t.seqs[0].allow = allow[0][0];
	size_t bytes;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == 0);
	allow[0][0][0] = 0;
	CHECK(rl_cuda_host_pack(&g, &l, &t.b, t.b.n_tokens, img, &bytes, samp_seq, samp_draft) == -EINVAL);
	printf("  %u sampling rows' masks checked\n", checked);
	CHECK(checked > 100);
	free(img);
	free(masks);
}

/* Nearest of the two candidates around f (by exact double distance), ties to the even one. */
static uint16_t bf16_ref(float f)
{
	uint32_t u; memcpy(&u, &f, 4);
	uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
	double dl = fabs((double)rl_bf16_to_f32(lo) - f);
	double vh = (hi & 0x7f80) == 0x7f80 ? copysign(ldexp(1.0, 128), f) /* IEEE: inf sits at 2^128 */
						 : (double)rl_bf16_to_f32(hi);
	double dh = fabs(vh - f);
	if ((u & 0xffff) == 0)
		return lo;
	return dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
}

static void test_bf16(void)
{
	const float special[] = { 0.0f, -0.0f, 1.0f, -2.5f, 1e-40f, 3.0e38f, INFINITY, -INFINITY };
	for (size_t i = 0; i < sizeof special / sizeof *special; i++)
		CHECK(rl_bf16_to_f32(rl_f32_to_bf16(special[i])) == special[i] ||
		      fabsf(special[i]) == 1e-40f || special[i] == 3.0e38f);
	CHECK(isnan(rl_bf16_to_f32(rl_f32_to_bf16(NAN))));
	CHECK(rl_f32_to_bf16(3.4e38f) == 0x7f80);     /* rounds up past the largest bf16 */
	/* ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins */
	CHECK(rl_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
	CHECK(rl_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
	for (int i = 0; i < 200000; i++) {
		uint32_t u = (uint32_t)rnd();
		if ((u & 0x7f800000u) == 0x7f800000u)
			continue;
		float f; memcpy(&f, &u, 4);
		if (i % 4 == 0) {                        /* exact ties are rare at random */
			u = (u & 0xffff0000u) | 0x8000u;
			memcpy(&f, &u, 4);
			if ((u & 0x7f800000u) == 0x7f800000u || (u & 0x7fff0000u) == 0x7f7f0000u)
				continue;
		}
		uint16_t got = rl_f32_to_bf16(f), want = bf16_ref(f);
		CHECKF(got == want, "%a: %04x want %04x", f, got, want);
		if (got != want)
			return;
	}
}

static void test_f16(void)
{
	for (int i = 0; i < 400000; i++) {
		uint32_t u = (uint32_t)rnd();
		/* concentrate on fp16's range (incl. subnormals, overflow edge) */
		if (i & 1)
			u = (u & 0x80000000u) | ((0x30000000u + (u & 0x1fffffffu)) & 0x7fffffffu);
		float f; memcpy(&f, &u, 4);
		if (isnan(f))
			continue;
		_Float16 h = (_Float16)f;               /* the compiler's IEEE round-to-nearest-even */
		uint16_t want; memcpy(&want, &h, 2);
		uint16_t got = rl_f32_to_f16(f);
		CHECKF(got == want, "%a: %04x want %04x", f, got, want);
		if (got != want)
			return;
		if ((want & 0x7c00) != 0x7c00)
			CHECK(rl_f16_to_f32(got) == (float)h);
	}
	CHECK(isnan(rl_f16_to_f32(rl_f32_to_f16(NAN))));
	CHECK(rl_f32_to_f16(65520.0f) == 0x7c00 && rl_f32_to_f16(65519.0f) == 0x7bff);
	uint16_t d[3]; float s[3] = { 1.0f, -2.0f, 0.5f };
	rl_cuda_host_convert(d, s, 3, RL_CUDA_FP16);
	CHECK(d[0] == 0x3c00 && d[1] == 0xc000 && d[2] == 0x3800);
	rl_cuda_host_convert(d, s, 3, RL_CUDA_BF16);
	CHECK(d[0] == 0x3f80 && d[1] == 0xc000 && d[2] == 0x3f00);
}

int main(void)
{
	RUN(test_parse_buckets);
	RUN(test_pick_bucket);
	RUN(test_caps);
	RUN(test_pack_random);
	RUN(test_pack_splits);
	RUN(test_pack_rejects);
	RUN(test_pack_masks_with_drafts);
	RUN(test_bf16);
	RUN(test_f16);
	TEST_MAIN_END();
}
