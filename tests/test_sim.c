/* test_sim.c — the sim backend computes rl_backend_sim.h's token function through the block table.
 * Tests: runtime/backend (sim).
 */
#include "tests/rl_test.h"
#include "runtime/backend/rl_backend.h"
#include "runtime/backend/rl_backend_sim.h"

static void sim_matches_formula_across_chunks(void)
{
	struct rl_backend_params p = { .n_kv_blocks = 8, .block_size = 4, .sim_vocab = 1000 };
	struct rl_backend *be; char err[128];
	REQUIRE(rl_backend_sim_create(&p, &be, err, sizeof err) == 0);
	uint32_t prompt[10] = { 1, 5, 9, 200, 7, 7, 3, 999, 4, 12 };
	uint32_t table[3] = { 6, 2, 5 };  /* shuffled physical blocks */
	/* chunk 1: 6 rows, chunk 2: 4 rows (samples) */
	uint32_t pos[10], rs[10] = { 0 };
	for (int i = 0; i < 10; i++) pos[i] = i;
	struct rl_batch_seq s = { .q_start = 0, .q_len = 6, .ctx_len = 6, .n_blocks = 2,
				  .block_table = table, .sample = 0 };
	struct rl_batch b = { .n_tokens = 6, .n_seqs = 1, .n_prefill = 1, .block_size = 4,
			      .tokens = prompt, .pos = pos, .row_seq = rs, .seqs = &s };
	int32_t out[1];
	CHECK(rl_backend_launch(be, &b) == 0);
	CHECK(rl_backend_finish(be, out) == 0 && out[0] == -1);
	s.q_len = 4; s.ctx_len = 10; s.n_blocks = 3; s.sample = 1;
	b.tokens = prompt + 6; b.pos = pos + 6; b.n_tokens = 4;
	CHECK(rl_backend_launch(be, &b) == 0);
	CHECK(rl_backend_finish(be, out) == 0);
	const uint32_t t = rl_sim_next(prompt, 10, 1000);
	CHECK(out[0] == (int32_t)t);
	/* a constraint's mask: the first allowed token at or after t, wrapping */
	uint32_t allow[32] = { 0 };
	const uint32_t u = (t + 500) % 1000, v = (t + 999) % 1000;
	allow[u / 32] |= 1u << (u % 32);
	allow[v / 32] |= 1u << (v % 32);
	s.allow = allow;
	CHECK(rl_backend_launch(be, &b) == 0);
	CHECK(rl_backend_finish(be, out) == 0 && out[0] == (int32_t)u && rl_sim_allowed(t, 1000, allow) == u);
	s.sample = 0;                  /* a mask on a row that does not sample is refused */
	CHECK(rl_backend_launch(be, &b) == 0 && rl_backend_finish(be, out) == -EINVAL);
	rl_backend_destroy(be);
}

int main(void)
{
	RUN(sim_matches_formula_across_chunks);
	TEST_MAIN_END();
}
