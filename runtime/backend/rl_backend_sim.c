/* rl_backend_sim.c — the sim backend: no model, a modelled step time, deterministic tokens.
 *
 * Its "KV cache" holds one 64-bit state per token slot (see rl_backend_sim.h), written and read through
 * the block table exactly as a real backend does, so scheduler and prefix-cache bugs show up as
 * wrong tokens. A step costs sim_step_ns + sim_token_ns * rows; the cost is spun, not slept
 * (launch records the deadline, poll reports done once it has passed), so the runtime thread
 * keeps polling rings while a sim step "runs", as it does for the GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/backend/rl_backend.h"
#include "ipc/rl_clock.h"
#include "runtime/backend/rl_backend_sim.h"

struct sim {
	struct rl_backend be;
	uint64_t *kv;                  /* [n_blocks * block_size] chained state per slot */
	uint32_t n_blocks, block_size, vocab;
	uint64_t step_ns, token_ns;
	uint64_t done_at;              /* deadline of the running step */
	const struct rl_batch *cur;
	int err;                       /* -errno from launch validation, reported by finish */
};

static inline uint64_t *slot(struct sim *s, const struct rl_batch_seq *q, uint32_t p)
{
	uint32_t bi = p / s->block_size;
	if (bi >= q->n_blocks || q->block_table[bi] >= s->n_blocks)
		return NULL;
	return &s->kv[(size_t)q->block_table[bi] * s->block_size + p % s->block_size];
}

static int sim_launch(struct rl_backend *be, const struct rl_batch *b)
{
	struct sim *s = be->priv;
	s->cur = b;
	s->err = 0;
	if (b->block_size != s->block_size)
		s->err = -EINVAL;
	for (uint32_t i = 0; i < b->n_seqs && !s->err; i++) {
		const struct rl_batch_seq *q = &b->seqs[i];
		if ((q->n_draft && (q->n_draft >= q->q_len || !q->draft_out || !q->sample)) ||
		    (q->allow && (!q->sample || q->n_draft))) {
			s->err = -EINVAL;
			break;
		}
		uint32_t p0 = q->ctx_len - q->q_len;
		uint64_t st = RL_SIM_STATE0;
		if (p0 > 0) {
			uint64_t *prev = slot(s, q, p0 - 1);
			if (!prev) { s->err = -EFAULT; break; }
			st = *prev;
		}
		for (uint32_t r = 0; r < q->q_len; r++) {
			uint64_t *dst = slot(s, q, p0 + r);
			if (!dst) { s->err = -EFAULT; break; }
			st = rl_sim_mix(st, b->tokens[q->q_start + r]);
			*dst = st;
		}
	}
	/* a step of no cost is done at once: no clock read (bench ipc measures the runtime's
	 * path, not the simulator's) */
	const uint64_t cost = s->step_ns + s->token_ns * b->n_tokens;
	s->done_at = cost ? rl_now_ns() + cost : 0;
	return 0;
}

static int sim_poll(struct rl_backend *be)
{
	struct sim *s = be->priv;
	return !s->done_at || rl_now_ns() >= s->done_at;
}

static int sim_finish(struct rl_backend *be, int32_t *out)
{
	struct sim *s = be->priv;
	const struct rl_batch *b = s->cur;
	while (s->done_at && rl_now_ns() < s->done_at)
		rl_cpu_relax();
	if (s->err)
		return s->err;
	for (uint32_t i = 0; i < b->n_seqs; i++) {
		const struct rl_batch_seq *q = &b->seqs[i];
		out[i] = q->sample ? (int32_t)rl_sim_allowed((uint32_t)(*slot(s, q, q->ctx_len - 1) % s->vocab),
							      s->vocab, q->allow) : -1;
		for (uint32_t j = 0; q->sample && j < q->n_draft && j < q->q_len; j++)   /* verification rows */
			q->draft_out[j] = (int32_t)(*slot(s, q, q->ctx_len - 1 - q->n_draft + j) % s->vocab);
	}
	s->cur = NULL;
	return 0;
}

static void sim_destroy(struct rl_backend *be)
{
	struct sim *s = be->priv;
	free(s->kv);
	free(s);
}

static const struct rl_backend_ops sim_ops = {
	.launch = sim_launch, .poll = sim_poll, .finish = sim_finish, .destroy = sim_destroy,
};

int rl_backend_sim_create(const struct rl_backend_params *p, struct rl_backend **out,
			  char *err, size_t errlen)
{
	if (!p->n_kv_blocks || !p->block_size) {
		snprintf(err, errlen, "sim backend: --kv-blocks and --block-size must be positive");
		return -EINVAL;
	}
	struct sim *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->n_blocks = p->n_kv_blocks;
	s->block_size = p->block_size;
	s->vocab = p->sim_vocab ? p->sim_vocab : 32000;
	s->step_ns = p->sim_step_ns;
	s->token_ns = p->sim_token_ns;
	s->kv = calloc((size_t)s->n_blocks * s->block_size, sizeof *s->kv);
	if (!s->kv) {
		free(s);
		snprintf(err, errlen, "sim backend: cannot allocate %u KV blocks", p->n_kv_blocks);
		return -ENOMEM;
	}
	s->be.ops = &sim_ops;
	s->be.priv = s;
	snprintf(s->be.info.name, sizeof s->be.info.name, "sim");
	snprintf(s->be.info.model_name, sizeof s->be.info.model_name, "sim");
	s->be.info.vocab_size = s->vocab;
	s->be.info.max_ctx = p->sim_max_ctx ? p->sim_max_ctx : RL_SIM_DEFAULT_CTX;
	s->be.info.bos_id = 1;
	s->be.info.eos_id = UINT32_MAX;
	s->be.info.max_draft_rows = UINT32_MAX;
	s->be.info.deterministic = 1;          /* a row's token depends on its sequence alone */
	*out = &s->be;
	return 0;
}
