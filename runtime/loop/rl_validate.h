/* rl_validate.h — the runtime's checks on untrusted input, as pure functions (no runtime
 * state, no syscalls) so they can be unit-tested and fuzzed on their own: a request record
 * copied out of a client's ring, the prompt copy-out from a client's arena, and the decision
 * on an attach request. rl_rt.c calls exactly these. */
#ifndef RL_VALIDATE_H
#define RL_VALIDATE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "ipc/rl_wire.h"

/* The limits a request is checked against (the runtime's effective values). */
struct rl_limits {
	uint32_t max_inflight;         /* request ids are < this */
	uint32_t max_prompt, max_new;
	uint32_t vocab;                /* token and stop ids are < this */
	uint32_t arena_ids;            /* a prompt can never be longer than the arena */
	int      logprobs;             /* the backend gives log-probabilities */
	int      deterministic;        /* the backend honours rl_batch.deterministic */
};

/* A SUBMIT record (already copied out of shared memory). 0, or the -errno its error event
 * carries: -EINVAL (bad op, id, counts, sampling parameters, more than RL_MAX_TOP_LOGPROBS
 * alternatives, a constraint kind it does not know or without text, or text without one),
 * -E2BIG (over a limit: the prompt and the constraint's text share the arena), -ETIMEDOUT
 * (deadline already past at now), -ERANGE (stop id outside the vocabulary), -ENOTSUP
 * (log-probabilities, or the deterministic mode, from a backend without them). */
int rl_rt_validate_req(const struct rl_req *r, const struct rl_limits *lim, uint64_t now);

/* Copies n prompt ids starting at pos (mod arena_mask + 1) out of the client-writable arena
 * into dst, then checks the copy (never the arena, which may change under us). n must be at
 * most arena_mask + 1. 0, or -ERANGE when an id is outside the vocabulary. */
int rl_rt_copy_prompt(uint32_t *dst, const uint32_t *arena, uint32_t arena_mask, uint32_t pos,
		      uint32_t n, uint32_t vocab);
/* Arena words a constraint text of len bytes takes (after the prompt's ids). */
static inline uint32_t rl_rt_cons_words(uint32_t len) { return (len + 3) / 4; }
/* Copies the len bytes of a constraint text starting at word pos (mod arena_mask + 1) into
 * dst[len + 1] and ends it with a NUL; the compiler then checks the copy. */
void rl_rt_copy_text(char *dst, const uint32_t *arena, uint32_t arena_mask, uint32_t pos, uint32_t len);

/* Who may attach, and whether there is room. */
struct rl_attach_policy {
	uid_t self_uid;
	const uid_t *allow_uid; int n_allow_uid;
	const gid_t *allow_gid; int n_allow_gid;
	int draining;
	uint32_t n_clients, max_clients;
};

/* Whether a peer with credentials uid/gid may attach at all: checked at accept, from
 * SO_PEERCRED, before the connection takes a pre-attach slot. 1 or 0; with 0, msg says how
 * the runtime's owner can admit it. */
int rl_rt_peer_allowed(const struct rl_attach_policy *pol, uid_t uid, gid_t gid, char *msg, size_t len);

/* The runtime's decision on an attach request from a peer with credentials uid/gid:
 * 0 (accept), or -EACCES / -EPROTO / -ESHUTDOWN / -EUSERS with a one-line reason in msg.
 * An observer (RL_ATTACH_OBSERVE) needs no client slot and is served while draining. When
 * other users may attach, the last client slot is kept for the runtime's own user, so a
 * foreign uid cannot lock the owner out of its own runtime. */
int rl_rt_attach_decide(const struct rl_attach_req *rq, uid_t uid, gid_t gid,
			const struct rl_attach_policy *pol, char *msg, size_t len);
#endif
