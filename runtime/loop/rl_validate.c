/* rl_validate.c — pure checks on what clients send the runtime (see rl_validate.h). Kept out
 * of rl_rt.c so the fuzzers (tests/fuzz/) drive the same code without a running runtime. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "runtime/loop/rl_validate.h"

static int sampling_ok(const struct rl_req *r, uint32_t vocab)
{
	return isfinite(r->temperature) && r->temperature >= 0 && r->temperature <= 1000 &&
	       isfinite(r->top_p) && r->top_p > 0 && r->top_p <= 1 && r->top_k <= vocab;
}

int rl_rt_validate_req(const struct rl_req *r, const struct rl_limits *lim, uint64_t now)
{
	if (r->op != RL_OP_SUBMIT || r->rid >= lim->max_inflight)
		return -EINVAL;
	if (r->n_prompt == 0 || (r->max_new == 0 && !r->prompt_logprobs) || r->n_stop > RL_MAX_STOP_IDS ||
	    !sampling_ok(r, lim->vocab) || r->logprobs > 1 + RL_MAX_TOP_LOGPROBS ||
	    r->prompt_logprobs > 1 + RL_MAX_TOP_LOGPROBS || r->no_spec > 1 || r->deterministic > 1)
		return -EINVAL;
	if (((r->logprobs || r->prompt_logprobs) && !lim->logprobs) || (r->deterministic && !lim->deterministic))
		return -ENOTSUP;
	if (r->cons_kind > RL_CONS_KIND_GBNF || !r->cons_kind != !r->cons_len)
		return -EINVAL;
	if (r->n_prompt > lim->max_prompt || r->max_new > lim->max_new || r->cons_len > RL_MAX_CONS_BYTES ||
	    (uint64_t)r->n_prompt + rl_rt_cons_words(r->cons_len) > lim->arena_ids)
		return -E2BIG;
	if (r->deadline_ns && r->deadline_ns <= now)
		return -ETIMEDOUT;
	for (uint32_t i = 0; i < r->n_stop; i++)
		if (r->stop[i] >= lim->vocab)
			return -ERANGE;
	return 0;
}

int rl_rt_copy_prompt(uint32_t *dst, const uint32_t *arena, uint32_t arena_mask, uint32_t pos,
		      uint32_t n, uint32_t vocab)
{
	pos &= arena_mask;
	uint32_t first = arena_mask + 1 - pos;
	if (first > n)
		first = n;
	memcpy(dst, arena + pos, (size_t)first * 4);
	memcpy(dst + first, arena, (size_t)(n - first) * 4);
	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++)
		bad |= dst[i] >= vocab;
	return bad ? -ERANGE : 0;
}

void rl_rt_copy_text(char *dst, const uint32_t *arena, uint32_t arena_mask, uint32_t pos, uint32_t len)
{
	for (uint32_t i = 0; i < rl_rt_cons_words(len); i++) {
		const uint32_t w = arena[(pos + i) & arena_mask];
		for (uint32_t k = 0; k < 4 && 4 * i + k < len; k++)
			dst[4 * i + k] = (char)(w >> (8 * k) & 0xff);
	}
	dst[len] = 0;
}

static int uid_allowed(const struct rl_attach_policy *p, uid_t uid, gid_t gid)
{
	if (uid == p->self_uid)
		return 1;
	for (int i = 0; i < p->n_allow_uid; i++)
		if (p->allow_uid[i] == uid)
			return 1;
	for (int i = 0; i < p->n_allow_gid; i++)
		if (p->allow_gid[i] == gid)
			return 1;
	return 0;
}

int rl_rt_peer_allowed(const struct rl_attach_policy *pol, uid_t uid, gid_t gid, char *msg, size_t len)
{
	if (uid_allowed(pol, uid, gid))
		return 1;
	snprintf(msg, len, "uid %u is not allowed to attach to this runtime (start ringlmd with --allow-uid %u or --allow-gid %u)",
		 (unsigned)uid, (unsigned)uid, (unsigned)gid);
	return 0;
}

int rl_rt_attach_decide(const struct rl_attach_req *rq, uid_t uid, gid_t gid,
			const struct rl_attach_policy *pol, char *msg, size_t len)
{
	/* credentials first: a stranger learns nothing about the protocol or the load */
	if (!rl_rt_peer_allowed(pol, uid, gid, msg, len))
		return -EACCES;
	if (rq->magic != RL_WIRE_MAGIC || rq->version != RL_WIRE_VERSION) {
		snprintf(msg, len, "protocol mismatch (client version %u, runtime %u): rebuild the client against this libringlm",
			 rq->version, RL_WIRE_VERSION);
		return -EPROTO;
	}
	if (rq->flags & RL_ATTACH_OBSERVE) {
		snprintf(msg, len, "observer");
		return 0;
	}
	if (pol->draining) {
		snprintf(msg, len, "the runtime is shutting down");
		return -ESHUTDOWN;
	}
	if (pol->n_clients >= pol->max_clients) {
		snprintf(msg, len, "too many clients (%u attached; raise --max-clients)", pol->max_clients);
		return -EUSERS;
	}
	int others_allowed = pol->n_allow_uid > 0 || pol->n_allow_gid > 0;
	if (others_allowed && uid != pol->self_uid && pol->max_clients > 1 &&
	    pol->n_clients + 1 >= pol->max_clients) {
		snprintf(msg, len, "too many clients (%u of %u attached; the last slot is kept for uid %u, the runtime's owner; raise --max-clients)",
			 pol->n_clients, pol->max_clients, (unsigned)pol->self_uid);
		return -EUSERS;
	}
	snprintf(msg, len, "ok");
	return 0;
}
