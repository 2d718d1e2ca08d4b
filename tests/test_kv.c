/* test_kv.c — the KV block manager: allocation, refcounts, prefix-cache chain hits, LRU
 * eviction order, exactness of hits, and that nothing leaks.
 * Tests: runtime/sched (rl_kv).
 */
#include <errno.h>
#include "tests/rl_test.h"
#include "runtime/sched/rl_kv.h"

static void alloc_free_refcount(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(4, 16, 0, &kv) == 0);
	int64_t b[4];
	for (int i = 0; i < 4; i++) {
		b[i] = rl_kv_alloc(kv);
		CHECK(b[i] >= 0 && b[i] < 4);
		CHECK(rl_kv_refcount(kv, (uint32_t)b[i]) == 1);
	}
	CHECK(rl_kv_alloc(kv) == -ENOMEM);
	CHECK(rl_kv_available(kv) == 0);
	rl_kv_unref(kv, (uint32_t)b[2]);
	CHECK(rl_kv_available(kv) == 1);
	CHECK(rl_kv_alloc(kv) == b[2]);          /* the freed block comes back */
	for (int i = 0; i < 4; i++)
		rl_kv_unref(kv, (uint32_t)b[i]);
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	CHECK(st.free == 4 && st.cached == 0 && st.cached_free == 0);
	rl_kv_destroy(kv);
}

static void fill(uint32_t *t, uint32_t n, uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = seed * 1000 + i;
}

/* Registers blocks for tokens[0..n_blk*bs) in a chain; returns their ids in ids[]. */
static void register_chain(struct rl_kv *kv, const uint32_t *tok, uint32_t n_blk, uint32_t bs,
			   uint32_t *ids)
{
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	for (uint32_t i = 0; i < n_blk; i++) {
		ids[i] = (uint32_t)rl_kv_alloc(kv);
		rl_kv_register(kv, ids[i], tok + i * bs, rl_kv_hash(kv, &c, tok + i * bs), &c);
		CHECK(c.blk == ids[i]);
	}
}

static void chain_hits_are_prefix_exact(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(16, 4, 1, &kv) == 0);
	uint32_t tok[16], ids[4], got[4];
	fill(tok, 16, 1);
	register_chain(kv, tok, 4, 4, ids);
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	/* 15 tokens: only 3 whole blocks can match */
	CHECK(rl_kv_lookup(kv, tok, 15, got, &c) == 3);
	CHECK(got[0] == ids[0] && got[1] == ids[1] && got[2] == ids[2]);
	CHECK(rl_kv_refcount(kv, ids[0]) == 2 && rl_kv_refcount(kv, ids[3]) == 1);
	for (int i = 0; i < 3; i++)
		rl_kv_unref(kv, got[i]);
	/* a different first block: the same later blocks must not match (chained) */
	uint32_t other[16];
	memcpy(other, tok, sizeof tok);
	other[1] ^= 1;
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, other, 16, got, &c) == 0);
	/* differing inside block 2: blocks 0 and 1 match */
	memcpy(other, tok, sizeof tok);
	other[9] ^= 1;
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, other, 16, got, &c) == 2);
	rl_kv_unref(kv, got[0]);
	rl_kv_unref(kv, got[1]);
	for (int i = 3; i >= 0; i--)
		rl_kv_unref(kv, ids[i]);
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	CHECK(st.cached == 4 && st.cached_free == 4 && st.free == 12);
	rl_kv_destroy(kv);
}

static void duplicate_register_keeps_first(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(8, 4, 1, &kv) == 0);
	uint32_t tok[8], a[2], b[2], got[2];
	fill(tok, 8, 2);
	register_chain(kv, tok, 2, 4, a);
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	b[0] = (uint32_t)rl_kv_alloc(kv);
	rl_kv_register(kv, b[0], tok, rl_kv_hash(kv, &c, tok), &c);
	CHECK(c.blk == a[0] && !rl_kv_is_cached(kv, b[0]));   /* chain follows the cached one */
	b[1] = (uint32_t)rl_kv_alloc(kv);
	rl_kv_register(kv, b[1], tok + 4, rl_kv_hash(kv, &c, tok + 4), &c);
	CHECK(c.blk == a[1] && !rl_kv_is_cached(kv, b[1]));
	rl_kv_unref(kv, b[1]);
	rl_kv_unref(kv, b[0]);
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, tok, 8, got, &c) == 2 && got[0] == a[0] && got[1] == a[1]);
	for (int i = 1; i >= 0; i--) {
		rl_kv_unref(kv, got[i]);
		rl_kv_unref(kv, a[i]);
	}
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	CHECK(st.free + st.cached_free == 8 && st.cached == 2);
	rl_kv_destroy(kv);
}

static void lru_eviction_order(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(4, 2, 1, &kv) == 0);
	uint32_t tok[8], ids[4];
	fill(tok, 8, 3);
	register_chain(kv, tok, 4, 2, ids);
	/* release last-first, as the scheduler does: tail blocks become the oldest in LRU */
	for (int i = 3; i >= 0; i--)
		rl_kv_unref(kv, ids[i]);
	CHECK(rl_kv_available(kv) == 4);
	/* a hit on block 0 and 1 takes them off the LRU; releasing makes them most recent */
	struct rl_kv_chain c;
	uint32_t got[4];
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, tok, 4, got, &c) == 2);
	rl_kv_unref(kv, got[1]);
	rl_kv_unref(kv, got[0]);
	/* LRU now: 3, 2, 1, 0 */
	CHECK(rl_kv_alloc(kv) == ids[3]);
	CHECK(rl_kv_alloc(kv) == ids[2]);
	CHECK(!rl_kv_is_cached(kv, ids[3]) && rl_kv_is_cached(kv, ids[1]));
	/* blocks 0 and 1 still hit; 2 was evicted, so the chain stops there */
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, tok, 8, got, &c) == 2);
	rl_kv_unref(kv, got[1]);
	rl_kv_unref(kv, got[0]);
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	CHECK(st.evictions == 2);
	rl_kv_destroy(kv);
}

/* An evicted parent re-used for other content must not revive its old children. */
static void evicted_parent_invalidates_children(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(2, 2, 1, &kv) == 0);
	uint32_t tok[4] = { 1, 2, 3, 4 }, ids[2], got[2];
	register_chain(kv, tok, 2, 2, ids);
	rl_kv_unref(kv, ids[0]);          /* parent first into the LRU: it is evicted first */
	rl_kv_unref(kv, ids[1]);
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	uint32_t x = (uint32_t)rl_kv_alloc(kv);
	CHECK(x == ids[0]);
	uint32_t other[2] = { 9, 9 };
	rl_kv_register(kv, x, other, rl_kv_hash(kv, &c, other), &c);
	rl_kv_chain_root(&c);
	CHECK(rl_kv_lookup(kv, tok, 4, got, &c) == 0);
	rl_kv_unref(kv, x);
	rl_kv_destroy(kv);
}

/* Random register/lookup/evict churn against a tiny table: the table never loses a live entry
 * (backward-shift deletion) and hits always return blocks holding the right tokens. */
static void churn_keeps_table_consistent(void)
{
	struct rl_kv *kv;
	const uint32_t n = 64, bs = 2;
	REQUIRE(rl_kv_create(n, bs, 1, &kv) == 0);
	uint32_t content[64][2], held[64], n_held = 0;
	uint64_t rng = 12345;
	for (int it = 0; it < 20000; it++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(rng >> 33);
		uint32_t tok[2] = { r % 97, (r >> 8) % 5 };
		struct rl_kv_chain c;
		rl_kv_chain_root(&c);
		uint32_t got;
		if (rl_kv_lookup(kv, tok, 2, &got, &c) == 1) {
			CHECK(content[got][0] == tok[0] && content[got][1] == tok[1]);
			rl_kv_unref(kv, got);
		} else if (n_held < n) {
			int64_t b = rl_kv_alloc(kv);
			if (b >= 0) {
				rl_kv_register(kv, (uint32_t)b, tok, rl_kv_hash(kv, &c, tok), &c);
				content[b][0] = tok[0];
				content[b][1] = tok[1];
				held[n_held++] = (uint32_t)b;
			}
		}
		if (n_held && (r & 1))
			rl_kv_unref(kv, held[--n_held]);
	}
	while (n_held)
		rl_kv_unref(kv, held[--n_held]);
	CHECK(rl_kv_available(kv) == n);
	rl_kv_destroy(kv);
}

static void bad_params(void)
{
	struct rl_kv *kv;
	CHECK(rl_kv_create(0, 16, 1, &kv) == -EINVAL);
	CHECK(rl_kv_create(16, 0, 1, &kv) == -EINVAL);
}

/* Spaces (rl_kv_chain_root_in): blocks registered from one space's root are found only from
 * it, the same tokens in another space hit nothing and register apart (the deterministic
 * mode's blocks, computed by other kernels, never serve a default request, nor the reverse) */
static void spaces_never_share_blocks(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(16, 4, 1, &kv) == 0);
	uint32_t tok[8], ids[2], got[2], det[2];
	fill(tok, 8, 3);
	register_chain(kv, tok, 2, 4, ids);                  /* space 0 */
	struct rl_kv_chain c;
	rl_kv_chain_root_in(&c, RL_KV_SPACE_DETERMINISTIC);
	CHECK(rl_kv_lookup(kv, tok, 8, got, &c) == 0);
	for (uint32_t i = 0; i < 2; i++) {                    /* the same text in the other space */
		det[i] = (uint32_t)rl_kv_alloc(kv);
		rl_kv_register(kv, det[i], tok + i * 4, rl_kv_hash(kv, &c, tok + i * 4), &c);
		CHECK(c.blk == det[i] && det[i] != ids[i]);
	}
	rl_kv_chain_root_in(&c, RL_KV_SPACE_DETERMINISTIC);
	CHECK(rl_kv_lookup(kv, tok, 8, got, &c) == 2 && got[0] == det[0] && got[1] == det[1]);
	rl_kv_chain_root(&c);
	uint32_t got0[2];
	CHECK(rl_kv_lookup(kv, tok, 8, got0, &c) == 2 && got0[0] == ids[0] && got0[1] == ids[1]);
	rl_kv_destroy(kv);
}

int main(void)
{
	RUN(alloc_free_refcount);
	RUN(chain_hits_are_prefix_exact);
	RUN(spaces_never_share_blocks);
	RUN(duplicate_register_keeps_first);
	RUN(lru_eviction_order);
	RUN(evicted_parent_invalidates_children);
	RUN(churn_keeps_table_consistent);
	RUN(bad_params);
	TEST_MAIN_END();
}
