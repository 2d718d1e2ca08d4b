/* rl_kv.h — the paged KV-cache manager: which physical KV blocks exist, who holds them, and
 * which full blocks are cached by content (prefix cache).
 *
 * It manages ids only; the backend owns the memory the ids index. A block is in one of three
 * states: held (refcount > 0), cached-free (refcount 0 but still registered in the prefix
 * cache, on an LRU list, reusable by a later hit), or free (on the free list). Allocation takes
 * a free block, else evicts the least recently released cached-free block.
 *
 * Prefix cache: a full block is keyed by its tokens and its parent in the chain (the block
 * before it in the sequence), so block i of a prompt matches only when blocks 0..i-1 matched
 * too. Hits are exact: the tokens of each cached block are kept in a side array and compared,
 * and the parent is named by (block id, generation), the generation changing whenever a block
 * leaves the cache, so a stale child of an evicted parent can never match.
 *
 * Everything is allocated by rl_kv_create; no call after it allocates.
 */
#ifndef RL_KV_H
#define RL_KV_H
#include <stdint.h>

#define RL_KV_NONE UINT32_MAX

struct rl_kv;

/* Where a sequence is in the prefix-cache chain: the last cached block of its prefix.
 * rl_kv_chain_root() is the state before block 0. */
struct rl_kv_chain {
	uint64_t hash;
	uint32_t blk;                  /* RL_KV_NONE at the root */
	uint32_t gen;
	uint32_t space;                /* the hash space its root names (rl_kv_chain_root_in) */
};

struct rl_kv_stats {
	uint32_t n_blocks;             /* pool size */
	uint32_t free;                 /* on the free list */
	uint32_t cached;               /* registered in the prefix cache (held or not) */
	uint32_t cached_free;          /* cached with refcount 0 (evictable, on the LRU list) */
	uint64_t evictions;
};

/* What the prefix cache tells an observer as it changes (KV events for fleet routers,
 * runtime/loop/rl_kvev.h). Called on the caller's thread, inside the call that made the change:
 * an observer copies what it needs and returns. */
struct rl_kv_observer {
	void *ctx;
	/* a full block entered the cache: its content hash, its parent's (has_parent 0 for a
	 * chain's first block), its block_size tokens, the hash space it lives in */
	void (*stored)(void *ctx, uint64_t hash, uint64_t parent_hash, int has_parent,
		       const uint32_t *tokens, uint32_t space);
	/* a block left the cache (evicted for new content, or reset) */
	void (*removed)(void *ctx, uint64_t hash);
	/* every block left the cache at once (rl_kv_reset) */
	void (*cleared)(void *ctx);
};

/* One cached block as rl_kv_snapshot copies it: enough to announce the cache afresh, parents
 * before children (sorted by depth). */
struct rl_kv_snap {
	uint64_t hash, parent_hash;
	uint32_t id, parent, parent_gen, gen;   /* parent RL_KV_NONE: a chain's first block */
	uint32_t depth;                /* blocks before it in its chain */
	uint32_t space;
};

/* prefix_cache 0 turns lookups and registration off (blocks are then only allocated/freed). */
int  rl_kv_create(uint32_t n_blocks, uint32_t block_size, int prefix_cache, struct rl_kv **out);
void rl_kv_destroy(struct rl_kv *kv);

/* A block with refcount 1: a free one, else the LRU cached-free one (evicted from the cache).
 * Returns its id, or -ENOMEM when every block is held. */
int64_t rl_kv_alloc(struct rl_kv *kv);
/* Drops one reference; at zero the block goes to the LRU tail if cached, else to the free list.
 * Release a sequence's blocks last-first, so its tail blocks are evicted before its head. */
void rl_kv_unref(struct rl_kv *kv, uint32_t blk);

void rl_kv_chain_root(struct rl_kv_chain *c);
/* The root of a separate space of chains: blocks registered under space s are found only by
 * lookups from space s's root (0 is rl_kv_chain_root's). The deterministic mode's blocks,
 * computed by other kernels, live in space RL_KV_SPACE_DETERMINISTIC. */
#define RL_KV_SPACE_DETERMINISTIC 1u
void rl_kv_chain_root_in(struct rl_kv_chain *c, uint32_t space);
/* Longest cached prefix of tokens[0..n_tokens) in whole blocks: writes the block ids to
 * table[], takes a reference on each, advances *chain to the last one; returns how many. */
uint32_t rl_kv_lookup(struct rl_kv *kv, const uint32_t *tokens, uint32_t n_tokens,
		      uint32_t *table, struct rl_kv_chain *chain);
/* Content hash of the block tokens[0..block_size) following *chain. */
uint64_t rl_kv_hash(const struct rl_kv *kv, const struct rl_kv_chain *chain,
		    const uint32_t *tokens);
/* Starts the cache-line loads rl_kv_register(blk, hash h) will need, so a caller registering
 * many blocks overlaps their memory latency instead of paying it one block after another. */
void rl_kv_prefetch(const struct rl_kv *kv, uint64_t h, uint32_t blk);
/* Registers the just-filled block blk holding tokens[0..block_size) after *chain; h is
 * rl_kv_hash(kv, chain, tokens). When an equal block is already cached (two sequences
 * prefilled the same text at once) blk stays private and the chain continues from the cached
 * one. *chain moves to the block that now stands for this content. */
void rl_kv_register(struct rl_kv *kv, uint32_t blk, const uint32_t *tokens, uint64_t h,
		    struct rl_kv_chain *chain);

/* Reports every later change of the cache to o (copied; NULL stops reporting). */
void rl_kv_set_observer(struct rl_kv *kv, const struct rl_kv_observer *o);
/* Empties the prefix cache: every cached block becomes free. -EBUSY (nothing changes) while a
 * request holds a cached block, as vLLM's reset_prefix_cache refuses; else how many left. */
int64_t rl_kv_reset(struct rl_kv *kv);
/* Copies every cached block into out[] (room for the pool, n_blocks) and its tokens into
 * tokens[] (n_blocks x block_size, block i's at i x block_size); returns how many. One pass
 * over the pool, no allocation. */
uint32_t rl_kv_snapshot(const struct rl_kv *kv, struct rl_kv_snap *out, uint32_t *tokens);
uint32_t rl_kv_block_size(const struct rl_kv *kv);

/* Blocks an allocation can get now (free + cached-free). */
uint32_t rl_kv_available(const struct rl_kv *kv);
uint32_t rl_kv_refcount(const struct rl_kv *kv, uint32_t blk);
int      rl_kv_is_cached(const struct rl_kv *kv, uint32_t blk);
void     rl_kv_get_stats(const struct rl_kv *kv, struct rl_kv_stats *st);

#endif
