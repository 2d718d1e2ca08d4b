/* rl_calib.c — the automatic budget's start-up calibration (rl_calib.h): timed steps of known
 * shapes run through the backend on the runtime thread before it serves, each entered into
 * the step model as its prior (rl_budget_prior), so the first long prompt does not meet a
 * model that has never seen a prefill token.
 *
 * Without a target (g->target_ns 0) the short prompt step's time sets it (shape 9, third;
 * rl_budget_default_target), before the shapes sized from it.
 *
 * The shapes cover every feature of the model and the region the pick works in: one decode
 * row; eight decode rows; a 7-token chunk beside a decode row (with the next, it separates a
 * prompt step's own cost from its tokens'); a 32-token prefill chunk (whose time against the decode row's gives
 * a first cost per prefill token); chunks sized from that cost to take about half, one and
 * one and a half times the target beside one decode row (the steps the pick will choose
 * between); a chunk after a cached prefix beside decode rows with long contexts; one decode
 * row with a long context; a long chunk alone. The short shapes run twice and the faster run
 * counts (the first pays page faults and cold caches); the long ones run once, sized to about
 * twice the target's worth of prefill, and only while the model fitted so far predicts they
 * end within the time allowed (a second). The steps write KV blocks from block 0 up, which no sequence
 * owns yet (the scheduler has admitted nothing), and sample nothing that is published.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/loop/rl_calib.h"
#include "ipc/rl_clock.h"

struct cstep {
	struct rl_batch b;
	struct rl_batch_seq *seqs;
	uint32_t *tokens, *pos, *row_seq, *bt;
	uint32_t next_block, max_rows, max_seqs;
};

/* Appends a sequence of q rows ending at ctx (prefill when q > 1 or prefill is set). Returns
 * -ENOSPC when rows, sequences or KV blocks run out. */
static int add(struct cstep *s, const struct rl_calib_geom *g, uint32_t q, uint32_t ctx, int prefill, uint32_t vocab)
{
	uint32_t i = s->b.n_seqs, row = s->b.n_tokens, nb = (ctx + g->block_size - 1) / g->block_size;
	if (i == s->max_seqs || row + q > s->max_rows || s->next_block + nb > g->n_blocks || ctx > g->max_ctx)
		return -ENOSPC;
	struct rl_batch_seq *x = &s->seqs[i];
	memset(x, 0, sizeof *x);
	x->q_start = row;
	x->q_len = q;
	x->ctx_len = ctx;
	x->n_blocks = nb;
	x->block_table = s->bt + s->next_block;
	for (uint32_t k = 0; k < nb; k++)
		s->bt[s->next_block + k] = s->next_block + k;
	s->next_block += nb;
	x->sample = !prefill;
	x->seq_id = i;
	x->sp.top_p = 1;                   /* greedy */
	for (uint32_t r = 0; r < q; r++) {
		s->tokens[row + r] = (1 + (row + r) * 7919u) % (vocab > 1 ? vocab : 2);
		s->pos[row + r] = ctx - q + r;
		s->row_seq[row + r] = i;
	}
	s->b.n_tokens += q;
	s->b.n_seqs++;
	if (prefill)
		s->b.n_prefill = s->b.n_seqs;     /* prefill chunks come first: callers add them first */
	return 0;
}

static void reset(struct cstep *s, uint32_t bs)
{
	memset(&s->b, 0, sizeof s->b);
	s->b.block_size = bs;
	s->b.tokens = s->tokens; s->b.pos = s->pos; s->b.row_seq = s->row_seq; s->b.seqs = s->seqs;
	s->next_block = 0;
}

/* Runs the step `runs` times; the fastest time in *ns. */
static int time_step(struct rl_backend *be, const struct rl_batch *b, int32_t *out, int runs, uint64_t *ns)
{
	*ns = UINT64_MAX;
	for (int k = 0; k < runs; k++) {
		uint64_t t0 = rl_now_ns();
		int rc = rl_backend_launch(be, b);
		if (!rc)
			rc = rl_backend_finish(be, out);
		if (rc)
			return rc;
		uint64_t dt = rl_now_ns() - t0;
		if (dt < *ns)
			*ns = dt;
	}
	return 0;
}

int rl_calib_warm(struct rl_backend *be, const struct rl_calib_geom *g)
{
	uint32_t rows = g->max_tokens, seqs = g->max_seqs < 8 ? g->max_seqs : 8, vocab = be->info.vocab_size;
	struct cstep s = { .max_rows = rows, .max_seqs = seqs };
	s.seqs = calloc(seqs, sizeof *s.seqs);
	s.tokens = calloc(rows, 4); s.pos = calloc(rows, 4); s.row_seq = calloc(rows, 4);
	s.bt = calloc(g->n_blocks ? g->n_blocks : 1, 4);
	int32_t *out = calloc(seqs, sizeof *out);
	int rc = s.seqs && s.tokens && s.pos && s.row_seq && s.bt && out ? 0 : -ENOMEM;
	uint32_t half_ctx = g->max_ctx / 2 ? g->max_ctx / 2 : 1, n = rows < 512 ? rows : 512;
	n = n > half_ctx ? half_ctx : n;
	for (int k = 0; !rc && k < 2; k++) {
		reset(&s, g->block_size);
		int r = 0;
		if (k == 0)
			r = add(&s, g, n, n, 1, vocab);
		for (uint32_t i = 0; k == 1 && i < seqs && !r; i++)
			r = add(&s, g, 1, 64 < half_ctx ? 64 : half_ctx, 0, vocab);
		uint64_t ns;
		if (s.b.n_seqs)
			rc = time_step(be, &s.b, out, 1, &ns);
	}
	free(s.seqs); free(s.tokens); free(s.pos); free(s.row_seq); free(s.bt); free(out);
	return rc;
}

int rl_calib_run(struct rl_budget *bud, struct rl_backend *be, const struct rl_calib_geom *g,
		 struct rl_calib_report *rep)
{
	memset(rep, 0, sizeof *rep);
	uint32_t rows = g->max_tokens, seqs = g->max_seqs < 16 ? g->max_seqs : 16, vocab = be->info.vocab_size;
	uint32_t max_bt = g->n_blocks;
	struct cstep s = { .max_rows = rows, .max_seqs = seqs };
	s.seqs = calloc(seqs, sizeof *s.seqs);
	s.tokens = calloc(rows, 4); s.pos = calloc(rows, 4); s.row_seq = calloc(rows, 4);
	s.bt = calloc(max_bt ? max_bt : 1, 4);
	int32_t *out = calloc(seqs, sizeof *out);
	int rc = s.seqs && s.tokens && s.pos && s.row_seq && s.bt && out ? 0 : -ENOMEM;
	uint64_t t_start = rl_now_ns(), t1 = 0;
	double per_tok = 0;
	uint32_t big = 256;
	uint32_t half_ctx = g->max_ctx / 2 ? g->max_ctx / 2 : 1;
	uint64_t target = g->target_ns;
	const int derive = !target;
	/* shape 9, a short chunk beside a decode row, runs third */
	static const int order[] = { 0, 1, 9, 2, 3, 4, 5, 6, 7, 8 };
	for (int i = 0; !rc && i < 10; i++) {
		const int k = order[i];
		/* past the time allowed, stop once the first shapes (every feature but the
		 * long-context ones) are in */
		if (i >= 4 && rl_now_ns() - t_start > g->max_ns)
			break;
		reset(&s, g->block_size);
		uint32_t n = 0, c = 0;
		int r = 0;
		switch (k) {
		case 0: r = add(&s, g, 1, 1, 0, vocab); break;                      /* one decode row */
		case 1: for (uint32_t i = 0; i < 8 && !r; i++)                      /* eight */
				r = add(&s, g, 1, 256 < half_ctx ? 256 : half_ctx, 0, vocab);
			break;
		case 2: n = 32 < rows ? 32 : rows;                                  /* a short chunk */
			r = add(&s, g, n, n, 1, vocab); break;
		case 3: case 4: case 5:     /* chunks beside a decode row: ½, 1, 1½ x the target */
			n = per_tok > 0 ? (uint32_t)(((double)target * (k - 2) / 2 - (double)t1) / per_tok) : 0;
			n = n < 2 ? 2 : n > rows - 1 ? rows - 1 : n;
			n = n > half_ctx ? half_ctx : n;
			r = add(&s, g, n, n, 1, vocab);
			if (!r)
				r = add(&s, g, 1, 64 < half_ctx ? 64 : half_ctx, 0, vocab);
			break;
		case 6: n = rows / 4 > 2 ? rows / 4 : 2;                          /* a chunk after a prefix */
			n = n > big ? big : n;
			c = n + (half_ctx > n ? n : 0);
			c = c > g->max_ctx ? g->max_ctx : c;
			n = n > c ? c : n;
			r = add(&s, g, n, c, 1, vocab);
			for (uint32_t i = 0; i < 4 && !r; i++)                      /* beside long decodes */
				r = add(&s, g, 1, 1024 < half_ctx ? 1024 : half_ctx, 0, vocab);
			break;
		case 7: r = add(&s, g, 1, 4096 < g->max_ctx ? 4096 : g->max_ctx, 0, vocab); break;  /* long context */
		case 9: if (rows < 8)                                             /* a short chunk */
				break;
			n = 7;
			r = add(&s, g, n, n, 1, vocab);
			if (!r)
				r = add(&s, g, 1, 64 < half_ctx ? 64 : half_ctx, 0, vocab);
			break;
		case 8: n = rows / 2 > 2 ? rows / 2 : 2;                          /* a long chunk alone */
			n = n > 2 * big ? 2 * big : n > half_ctx ? half_ctx : n;
			r = add(&s, g, n, n, 1, vocab); break;
		}
		if (r == -ENOSPC && s.b.n_seqs)
			r = 0;                     /* what fits of the shape */
		if (r || !s.b.n_seqs)
			continue;
		/* the long shapes run once, and only while the model (fitted on the first shapes)
		 * predicts they end within the time allowed */
		double f[RL_BUDGET_NF];
		rl_budget_features(bud, &s.b, f);
		int runs = k < 6 || k == 9 ? 2 : 1;
		if (i >= 4 && rl_now_ns() - t_start + runs * rl_budget_predict(bud, f) > g->max_ns)
			continue;
		uint64_t ns;
		if ((rc = time_step(be, &s.b, out, runs, &ns)))
			break;
		rl_budget_prior(bud, f, (double)ns);
		rep->steps++;
		if (k == 0)
			t1 = ns;
		/* no target given: derived from the short prompt step (the one-row step until then,
		 * and where that shape does not fit) */
		if ((k == 0 || k == 9) && derive)
			target = bud->target_ns = rl_budget_default_target((double)ns);
		if (k == 2 && n > 1)
			per_tok = ns > t1 ? (double)(ns - t1) / (n - 1) : 1e3;
		if (per_tok < 1)
			per_tok = 1;
		/* the chunks after a prefix: about twice the target's worth of prefill */
		big = (uint32_t)(2.0 * (double)target / per_tok);
		big = big < 16 ? 16 : big > 1024 ? 1024 : big;
	}
	if (!bud->target_ns)               /* the one-row step failed: the default's ceiling */
		bud->target_ns = rl_budget_default_target(0);
	rep->target_ns = bud->target_ns;
	rep->ns = rl_now_ns() - t_start;
	bud->calib_ns = rep->ns;
	free(s.seqs); free(s.tokens); free(s.pos); free(s.row_seq); free(s.bt); free(out);
	return rc;
}
