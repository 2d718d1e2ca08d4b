/* det_harness.h — the deterministic mode's test harness (issue 51), shared by test_e2e_model
 * (stories260K) and test_real_models (SmolLM2, Gemma 3): one target request run beside random
 * background requests on one client, its tokens and the bits of its log-probabilities kept. */
#ifndef RL_DET_HARNESS_H
#define RL_DET_HARNESS_H
#include <stdint.h>
#include <string.h>
#include "clients/ringlm.h"

/* What one request gave: its tokens and the bits of each one's log-probabilities */
struct det_out {
	uint32_t ids[64];
	struct ringlm_logprobs lp[64];
	int n;
};

static uint64_t det_rng = 99;
static uint32_t det_rand(uint32_t n)
{
	det_rng = det_rng * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(det_rng >> 33) % n;
}

/* Submits a background request: random ids, random length and sampling (tag 1000 + k) */
static int det_background(struct ringlm *c, uint32_t vocab, int k)
{
	uint32_t p[80];
	const uint32_t n = 3 + det_rand(70);
	for (uint32_t i = 0; i < n; i++)
		p[i] = 3 + det_rand(vocab - 3);
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = n;
	r.max_new = 1 + det_rand(40);
	r.temperature = det_rand(2) ? 0.7f : 0;
	r.seed = det_rand(1000);
	r.tag = 1000 + (uint64_t)k;
	return ringlm_submit(c, &r, NULL);
}

/* Runs the target request (prompt p, max_new tokens sampled at temperature 0.8, seed 7; with its
 * log-probabilities and 3 alternatives when lp, else none, so speculation may draft for it)
 * while `load` background requests run beside it, each replaced when it ends. */
static int det_run(struct ringlm *c, uint32_t vocab, const uint32_t *p, int np, uint32_t max_new, int det, int lp,
		   int load, struct det_out *o)
{
	struct ringlm_request r = ringlm_default_request();
	r.prompt = p;
	r.n_prompt = (uint32_t)np;
	r.max_new = max_new;
	r.temperature = 0.8f;
	r.seed = 7;
	r.logprobs = (uint8_t)lp;
	r.top_logprobs = lp ? 3 : 0;
	r.deterministic = (uint8_t)det;
	r.tag = 1;
	int live = 0, bg = 0;
	for (; live < load / 2; live++)     /* some before it: its first steps are shared too */
		if (det_background(c, vocab, bg++))
			return -1;
	if (ringlm_submit(c, &r, NULL))
		return -1;
	for (; live < load; live++)
		if (det_background(c, vocab, bg++))
			return -1;
	memset(o, 0, sizeof *o);
	for (int done = 0; !done || live;) {
		struct ringlm_event ev[32];
		struct ringlm_logprobs l[32];
		const int k = ringlm_wait_ex(c, ev, l, 32, 120000);
		if (k <= 0)
			return -1;
		for (int i = 0; i < k; i++) {
			if (ev[i].tag != 1) {            /* background: replaced while the target runs */
				if (ev[i].type == RINGLM_EV_TOKEN)
					continue;
				live--;
				if (!done && det_background(c, vocab, bg++) == 0)
					live++;
				continue;
			}
			if (ev[i].type != RINGLM_EV_TOKEN) {
				if (ev[i].type != RINGLM_EV_DONE)
					return -1;
				done = 1;
				continue;
			}
			if (o->n >= 64)
				return -1;
			o->ids[o->n] = ev[i].token;
			o->lp[o->n++] = l[i];
		}
	}
	return 0;
}

static int det_same(const struct det_out *a, const struct det_out *b, int lp)
{
	if (a->n != b->n || memcmp(a->ids, b->ids, a->n * sizeof *a->ids))
		return 0;
	for (int i = 0; lp && i < a->n; i++)
		if (memcmp(&a->lp[i].logprob, &b->lp[i].logprob, sizeof a->lp[i].logprob) ||
		    a->lp[i].n_top != b->lp[i].n_top ||
		    memcmp(a->lp[i].top_id, b->lp[i].top_id, a->lp[i].n_top * sizeof *a->lp[i].top_id) ||
		    memcmp(a->lp[i].top_logprob, b->lp[i].top_logprob, a->lp[i].n_top * sizeof *a->lp[i].top_logprob))
			return 0;
	return 1;
}

#endif
