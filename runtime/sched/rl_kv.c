/* rl_kv.c — KV block pool with reference counts, an LRU of evictable cached blocks and the
 * prefix-cache hash table (see rl_kv.h for the model).
 *
 * The hash table is open addressing with linear probing and backward-shift deletion (no
 * tombstones, so it never degrades), sized at create to at least twice the pool: every block is
 * in it at most once. Lists are intrusive and index-based, so every operation is O(1) except a
 * lookup, which costs one hash and one compare per matched block.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "runtime/sched/rl_kv.h"

#define ROOT_HASH 0x6A09E667F3BCC909ull

struct blk {
	uint64_t hash;                 /* chained content hash while cached */
	uint64_t parent_hash;          /* the chain's hash before it (the root's for a first block) */
	uint32_t ref;
	uint32_t prev, next;           /* LRU links while cached-free; next = free-list link */
	uint32_t parent, parent_gen;   /* chain parent while cached */
	uint32_t gen;                  /* bumped whenever the block leaves the cache */
	uint32_t depth;                /* blocks before it in its chain */
	uint32_t space;                /* its chain's hash space */
	uint8_t  cached;
};

/* A hash-table slot carries the low hash bits next to the id, so probing a run compares
 * within the table and touches a block's metadata only on a likely hit. */
struct slot {
	uint32_t id;                   /* RL_KV_NONE = empty */
	uint32_t hlo;                  /* low 32 bits of the block's hash; home = hlo & mask */
};

struct rl_kv {
	struct blk *b;
	uint32_t *toks;                /* [n * bs] token ids of each cached block */
	struct slot *slot;             /* [mask + 1] hash table */
	uint32_t mask;
	uint32_t n, bs;
	int prefix;
	uint32_t free_head, n_free;
	uint32_t lru_head, lru_tail, n_lru;
	uint32_t n_cached;
	uint64_t evictions;
	struct rl_kv_observer obs;     /* obs.ctx NULL: nobody listens */
};

static uint64_t block_hash(uint64_t h, const uint32_t *t, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		h ^= t[i] + 0x9E3779B97F4A7C15ull;
		h *= 0xFF51AFD7ED558CCDull;
		h ^= h >> 32;
	}
	h ^= h >> 33;
	h *= 0xC4CEB9FE1A85EC53ull;
	return h ^ (h >> 33);
}

void rl_kv_chain_root(struct rl_kv_chain *c)
{
	rl_kv_chain_root_in(c, 0);
}

void rl_kv_chain_root_in(struct rl_kv_chain *c, uint32_t space)
{
	/* a space's root is its own hash, so its chains never meet another's */
	c->hash = space ? block_hash(ROOT_HASH, &space, 1) : ROOT_HASH;
	c->blk = RL_KV_NONE;
	c->gen = 0;
	c->space = space;
}

int rl_kv_create(uint32_t n_blocks, uint32_t block_size, int prefix_cache, struct rl_kv **out)
{
	if (!n_blocks || !block_size || n_blocks >= RL_KV_NONE / 2 ||
	    (uint64_t)n_blocks * block_size > (1ull << 34))
		return -EINVAL;
	struct rl_kv *kv = calloc(1, sizeof *kv);
	if (!kv)
		return -ENOMEM;
	uint32_t size = 2;
	while (size < 2 * n_blocks)
		size <<= 1;
	kv->n = n_blocks;
	kv->bs = block_size;
	kv->prefix = prefix_cache;
	kv->mask = size - 1;
	kv->b = calloc(n_blocks, sizeof *kv->b);
	kv->slot = prefix_cache ? malloc(size * sizeof *kv->slot) : NULL;
	kv->toks = prefix_cache ? malloc((size_t)n_blocks * block_size * sizeof *kv->toks) : NULL;
	if (!kv->b || (prefix_cache && (!kv->slot || !kv->toks))) {
		rl_kv_destroy(kv);
		return -ENOMEM;
	}
	/* touch the cache arrays now: no page faults on the step path later */
	if (prefix_cache) {
		for (uint32_t i = 0; i < size; i++)
			kv->slot[i] = (struct slot){ RL_KV_NONE, 0 };
		memset(kv->toks, 0, (size_t)n_blocks * block_size * sizeof *kv->toks);
	}
	/* free list in id order: block 0 first */
	for (uint32_t i = 0; i < n_blocks; i++)
		kv->b[i].next = i + 1 < n_blocks ? i + 1 : RL_KV_NONE;
	kv->free_head = 0;
	kv->n_free = n_blocks;
	kv->lru_head = kv->lru_tail = RL_KV_NONE;
	*out = kv;
	return 0;
}

void rl_kv_destroy(struct rl_kv *kv)
{
	if (!kv)
		return;
	free(kv->b);
	free(kv->slot);
	free(kv->toks);
	free(kv);
}

/* --- LRU list of cached-free blocks ------------------------------------------------------ */

static void lru_push_tail(struct rl_kv *kv, uint32_t id)
{
	struct blk *b = &kv->b[id];
	b->next = RL_KV_NONE;
	b->prev = kv->lru_tail;
	if (kv->lru_tail != RL_KV_NONE)
		kv->b[kv->lru_tail].next = id;
	else
		kv->lru_head = id;
	kv->lru_tail = id;
	kv->n_lru++;
}

static void lru_remove(struct rl_kv *kv, uint32_t id)
{
	struct blk *b = &kv->b[id];
	if (b->prev != RL_KV_NONE)
		kv->b[b->prev].next = b->next;
	else
		kv->lru_head = b->next;
	if (b->next != RL_KV_NONE)
		kv->b[b->next].prev = b->prev;
	else
		kv->lru_tail = b->prev;
	kv->n_lru--;
}

/* --- hash table ----------------------------------------------------------------------- */

static void table_insert(struct rl_kv *kv, uint32_t id)
{
	uint32_t hlo = (uint32_t)kv->b[id].hash, i = hlo & kv->mask;
	while (kv->slot[i].id != RL_KV_NONE)
		i = (i + 1) & kv->mask;
	kv->slot[i] = (struct slot){ id, hlo };
}

/* Backward-shift deletion: pull later members of the probe run into the hole when their home
 * slot does not lie cyclically in (hole, j]. */
static void table_remove(struct rl_kv *kv, uint32_t id)
{
	uint32_t i = (uint32_t)kv->b[id].hash & kv->mask;
	while (kv->slot[i].id != id) {
		assert(kv->slot[i].id != RL_KV_NONE);
		i = (i + 1) & kv->mask;
	}
	for (uint32_t j = i;;) {
		kv->slot[i].id = RL_KV_NONE;
		for (;;) {
			j = (j + 1) & kv->mask;
			if (kv->slot[j].id == RL_KV_NONE)
				return;
			uint32_t home = kv->slot[j].hlo & kv->mask;
			if (((j - home) & kv->mask) >= ((j - i) & kv->mask))
				break;
		}
		kv->slot[i] = kv->slot[j];
		i = j;
	}
}

static uint32_t table_find(const struct rl_kv *kv, uint64_t h, const struct rl_kv_chain *c,
			   const uint32_t *tokens)
{
	for (uint32_t i = (uint32_t)h & kv->mask; kv->slot[i].id != RL_KV_NONE;
	     i = (i + 1) & kv->mask) {
		if (kv->slot[i].hlo != (uint32_t)h)
			continue;
		uint32_t id = kv->slot[i].id;
		const struct blk *b = &kv->b[id];
		if (b->hash == h && b->parent == c->blk && b->parent_gen == c->gen &&
		    !memcmp(&kv->toks[(size_t)id * kv->bs], tokens, kv->bs * sizeof *tokens))
			return id;
	}
	return RL_KV_NONE;
}

static void uncache(struct rl_kv *kv, uint32_t id)
{
	if (kv->obs.removed)
		kv->obs.removed(kv->obs.ctx, kv->b[id].hash);
	table_remove(kv, id);
	kv->b[id].cached = 0;
	kv->b[id].gen++;
	kv->n_cached--;
}

/* --- public --------------------------------------------------------------------------- */

int64_t rl_kv_alloc(struct rl_kv *kv)
{
	uint32_t id = kv->free_head;
	if (id != RL_KV_NONE) {
		kv->free_head = kv->b[id].next;
		kv->n_free--;
	} else {
		id = kv->lru_head;
		if (id == RL_KV_NONE)
			return -ENOMEM;
		lru_remove(kv, id);
		uncache(kv, id);
		kv->evictions++;
	}
	kv->b[id].ref = 1;
	return id;
}

void rl_kv_unref(struct rl_kv *kv, uint32_t id)
{
	struct blk *b = &kv->b[id];
	assert(id < kv->n && b->ref > 0);
	if (--b->ref)
		return;
	if (b->cached) {
		lru_push_tail(kv, id);
	} else {
		b->next = kv->free_head;
		kv->free_head = id;
		kv->n_free++;
	}
}

uint32_t rl_kv_lookup(struct rl_kv *kv, const uint32_t *tokens, uint32_t n_tokens,
		      uint32_t *table, struct rl_kv_chain *chain)
{
	if (!kv->prefix)
		return 0;
	uint32_t n = 0;
	for (; (n + 1) * kv->bs <= n_tokens; n++) {
		const uint32_t *t = tokens + (size_t)n * kv->bs;
		uint64_t h = block_hash(chain->hash, t, kv->bs);
		uint32_t id = table_find(kv, h, chain, t);
		if (id == RL_KV_NONE)
			break;
		if (kv->b[id].ref++ == 0)
			lru_remove(kv, id);
		table[n] = id;
		chain->hash = h;
		chain->blk = id;
		chain->gen = kv->b[id].gen;
	}
	return n;
}

uint64_t rl_kv_hash(const struct rl_kv *kv, const struct rl_kv_chain *chain,
		    const uint32_t *tokens)
{
	return block_hash(chain->hash, tokens, kv->bs);
}

void rl_kv_prefetch(const struct rl_kv *kv, uint64_t h, uint32_t id)
{
	if (!kv->prefix)
		return;
	__builtin_prefetch(&kv->slot[(uint32_t)h & kv->mask]);
	__builtin_prefetch(&kv->b[id], 1);
	__builtin_prefetch(&kv->toks[(size_t)id * kv->bs], 1);
}

void rl_kv_register(struct rl_kv *kv, uint32_t id, const uint32_t *tokens, uint64_t h,
		    struct rl_kv_chain *chain)
{
	if (!kv->prefix)
		return;
	struct blk *b = &kv->b[id];
	assert(id < kv->n && b->ref > 0 && !b->cached);
	uint32_t dup = table_find(kv, h, chain, tokens);
	if (dup == RL_KV_NONE) {
		b->hash = h;
		b->parent_hash = chain->hash;
		b->parent = chain->blk;
		b->parent_gen = chain->gen;
		b->depth = chain->blk == RL_KV_NONE ? 0 : kv->b[chain->blk].depth + 1;
		b->space = chain->space;
		b->cached = 1;
		memcpy(&kv->toks[(size_t)id * kv->bs], tokens, kv->bs * sizeof *tokens);
		table_insert(kv, id);
		kv->n_cached++;
		dup = id;
		if (kv->obs.stored)
			kv->obs.stored(kv->obs.ctx, h, chain->hash, chain->blk != RL_KV_NONE, tokens, chain->space);
	}
	chain->hash = h;
	chain->blk = dup;
	chain->gen = kv->b[dup].gen;
}

void rl_kv_set_observer(struct rl_kv *kv, const struct rl_kv_observer *o)
{
	kv->obs = o ? *o : (struct rl_kv_observer){ 0 };
}

int64_t rl_kv_reset(struct rl_kv *kv)
{
	if (kv->n_cached != kv->n_lru)
		return -EBUSY;
	uint32_t n = 0;
	while (kv->lru_head != RL_KV_NONE) {   /* each goes to the free list as rl_kv_unref would */
		uint32_t id = kv->lru_head;
		lru_remove(kv, id);
		table_remove(kv, id);      /* not uncache(): one cleared event, not one a block */
		kv->b[id].cached = 0;
		kv->b[id].gen++;
		kv->n_cached--;
		kv->b[id].next = kv->free_head;
		kv->free_head = id;
		kv->n_free++;
		n++;
	}
	if (kv->obs.cleared)
		kv->obs.cleared(kv->obs.ctx);
	return n;
}

uint32_t rl_kv_snapshot(const struct rl_kv *kv, struct rl_kv_snap *out, uint32_t *tokens)
{
	uint32_t n = 0;
	for (uint32_t id = 0; id < kv->n && kv->prefix; id++) {
		const struct blk *b = &kv->b[id];
		if (!b->cached)
			continue;
		out[n] = (struct rl_kv_snap){ b->hash, b->parent_hash, id, b->parent, b->parent_gen, b->gen,
					      b->depth, b->space };
		memcpy(tokens + (size_t)n * kv->bs, &kv->toks[(size_t)id * kv->bs], kv->bs * sizeof *tokens);
		n++;
	}
	return n;
}

uint32_t rl_kv_block_size(const struct rl_kv *kv)
{
	return kv->bs;
}

uint32_t rl_kv_available(const struct rl_kv *kv)
{
	return kv->n_free + kv->n_lru;
}

uint32_t rl_kv_refcount(const struct rl_kv *kv, uint32_t id)
{
	return id < kv->n ? kv->b[id].ref : 0;
}

int rl_kv_is_cached(const struct rl_kv *kv, uint32_t id)
{
	return id < kv->n && kv->b[id].cached;
}

void rl_kv_get_stats(const struct rl_kv *kv, struct rl_kv_stats *st)
{
	st->n_blocks = kv->n;
	st->free = kv->n_free;
	st->cached = kv->n_cached;
	st->cached_free = kv->n_lru;
	st->evictions = kv->evictions;
}
