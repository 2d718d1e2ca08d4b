/* fuzz_req.c — libFuzzer harness for the runtime's request-descriptor validation
 * (rl_rt_validate_req) and the prompt copy-out from a client's arena (rl_rt_copy_prompt).
 * Input: a 128-byte rl_req, 20 bytes of limits and the clock, then the arena (any length;
 * its power-of-two prefix is used). Properties: an accepted request fits every limit (log-
 * probabilities only from a backend that has them), and the
 * copy-out reads only inside the arena (ASan) and writes only n_prompt ids.
 * Tests: runtime/loop (rl_validate).
 */
#include <errno.h>
#include <math.h>
#include "tests/fuzz/fuzz_common.h"
#include "runtime/loop/rl_validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rl_req r;
	uint32_t lim_raw[5];
	if (size < sizeof r + sizeof lim_raw)
		return 0;
	memcpy(&r, data, sizeof r);
	memcpy(lim_raw, data + sizeof r, sizeof lim_raw);
	const uint8_t *rest = data + sizeof r + sizeof lim_raw;
	size_t rest_len = size - sizeof r - sizeof lim_raw;
	/* the arena: the largest power of two of whole ids in the rest (at least one id) */
	uint32_t arena_ids = 1;
	while ((size_t)arena_ids * 2 * 4 <= rest_len && arena_ids < (1u << 16))
		arena_ids *= 2;
	uint32_t *arena = malloc((size_t)arena_ids * 4);
	memset(arena, 0, (size_t)arena_ids * 4);
	memcpy(arena, rest, rest_len < (size_t)arena_ids * 4 ? rest_len : (size_t)arena_ids * 4);
	struct rl_limits lim = {
		.max_inflight = 1 + lim_raw[0] % 65536, .max_prompt = 1 + lim_raw[1] % 8192,
		.max_new = 1 + lim_raw[2] % 8192, .vocab = 2 + lim_raw[3] % 200000, .arena_ids = arena_ids,
		.logprobs = (lim_raw[0] >> 16) & 1, .deterministic = (lim_raw[0] >> 17) & 1,
	};
	uint64_t now = lim_raw[4];
	int rc = rl_rt_validate_req(&r, &lim, now);
	FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -E2BIG || rc == -ETIMEDOUT || rc == -ERANGE ||
		    (rc == -ENOTSUP && (((r.logprobs || r.prompt_logprobs) && !lim.logprobs) ||
					(r.deterministic && !lim.deterministic))));
	if (rc == 0) {
		FUZZ_ASSERT(r.op == RL_OP_SUBMIT && r.rid < lim.max_inflight);
		FUZZ_ASSERT(r.n_prompt >= 1 && r.n_prompt <= lim.max_prompt && r.n_prompt <= arena_ids);
		FUZZ_ASSERT((r.max_new >= 1 || r.prompt_logprobs) && r.max_new <= lim.max_new && r.n_stop <= RL_MAX_STOP_IDS);
		FUZZ_ASSERT(r.logprobs <= 1 + RL_MAX_TOP_LOGPROBS && r.prompt_logprobs <= 1 + RL_MAX_TOP_LOGPROBS &&
			    (!(r.logprobs || r.prompt_logprobs) || lim.logprobs));
		FUZZ_ASSERT(isfinite(r.temperature) && r.temperature >= 0 && r.top_p > 0 && r.top_p <= 1);
		FUZZ_ASSERT(r.no_spec <= 1 && r.deterministic <= 1 && (!r.deterministic || lim.deterministic));
		FUZZ_ASSERT(!r.deadline_ns || r.deadline_ns > now);
		/* exactly n_prompt ids: a heap block of that size makes ASan catch any overrun */
		uint32_t *dst = malloc((size_t)r.n_prompt * 4);
		int cr = rl_rt_copy_prompt(dst, arena, arena_ids - 1, r.arena_pos, r.n_prompt, lim.vocab);
		FUZZ_ASSERT(cr == 0 || cr == -ERANGE);
		for (uint32_t i = 0; i < r.n_prompt; i++) {
			FUZZ_ASSERT(dst[i] == arena[(r.arena_pos + i) & (arena_ids - 1)]);
			FUZZ_ASSERT(cr == -ERANGE || dst[i] < lim.vocab);
		}
		free(dst);
	}
	free(arena);
	return 0;
}
