/* rl_ring.h — single-producer/single-consumer ring of fixed-size slots in shared memory.
 *
 * Shared part (struct rl_ring_hdr, in the segment): two free-running 32-bit indices, each on
 * its own pair of cache lines (128 B, so the adjacent-line prefetcher does not couple them):
 *   prod  — written only by the producer: number of slots ever published;
 *   cons  — written only by the consumer: number of slots ever released.
 * Slot i lives at slots + (i & mask) * slot_size. Capacity is a power of two; used = prod - cons
 * (mod 2^32) is always in [0, capacity] for honest peers.
 *
 * Private part (struct rl_ring_prod / rl_ring_cons, in each process's own memory): the ring
 * geometry (mask, slot size, pointers) and each side's own index and a cached copy of the other
 * side's index. Geometry is never re-read from shared memory, so a hostile peer cannot change
 * where we read or write; the only shared values we read are the peer's index, and a value that
 * would make used > capacity is rejected (-EPROTO) instead of trusted.
 *
 * Memory ordering (C11 atomics; one acquire/release pair per direction):
 *   (P1) producer writes slot contents (plain stores), then
 *   (P2) store-release prod            ── pairs with (C1)
 *   (C1) consumer load-acquire prod    ── sees every slot store before (P2)
 *   (C2) consumer reads slot contents (plain loads; it copies before validating), then
 *   (C3) store-release cons            ── pairs with (P0)
 *   (P0) producer load-acquire cons    ── slots below cons are no longer read: safe to reuse.
 * Each side reads the other's index only when its cached copy says full (producer) or empty
 * (consumer): the fast path touches no shared cache line but the slots. Publishing n slots at
 * once costs one release store.
 *
 * Sleep/wake (doorbells) is not part of the ring: see rl_wire.h.
 */
#ifndef RL_RING_H
#define RL_RING_H
#include <errno.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#define RL_CACHELINE 64

struct rl_ring_hdr {
	_Alignas(2 * RL_CACHELINE) _Atomic uint32_t prod;
	uint8_t _pad0[2 * RL_CACHELINE - sizeof(uint32_t)];
	_Alignas(2 * RL_CACHELINE) _Atomic uint32_t cons;
	uint8_t _pad1[2 * RL_CACHELINE - sizeof(uint32_t)];
};

struct rl_ring_prod {
	struct rl_ring_hdr *hdr;
	uint8_t *slots;
	uint32_t mask, slot_size;
	uint32_t head;                 /* our prod (private truth) */
	uint32_t cons_cache;           /* last cons we read */
};

struct rl_ring_cons {
	struct rl_ring_hdr *hdr;
	uint8_t *slots;
	uint32_t mask, slot_size;
	uint32_t tail;                 /* our cons (private truth) */
	uint32_t prod_cache;           /* last prod we read */
};

/* Zeroes the shared indices (done once by the segment's creator). */
static inline void rl_ring_hdr_init(struct rl_ring_hdr *h)
{
	atomic_store_explicit(&h->prod, 0, memory_order_relaxed);
	atomic_store_explicit(&h->cons, 0, memory_order_relaxed);
}

/* Attach the producer side. cap must be a power of two. Starts from the shared indices (a
 * client attaching to a fresh segment sees zeros; the runtime never reads them here). */
static inline void rl_ring_prod_init(struct rl_ring_prod *p, struct rl_ring_hdr *h, void *slots,
				     uint32_t cap, uint32_t slot_size)
{
	p->hdr = h;
	p->slots = slots;
	p->mask = cap - 1;
	p->slot_size = slot_size;
	p->head = 0;
	p->cons_cache = 0;
}

static inline void rl_ring_cons_init(struct rl_ring_cons *c, struct rl_ring_hdr *h, void *slots,
				     uint32_t cap, uint32_t slot_size)
{
	c->hdr = h;
	c->slots = slots;
	c->mask = cap - 1;
	c->slot_size = slot_size;
	c->tail = 0;
	c->prod_cache = 0;
}

/* Free slots for the producer (>= want if possible), or -EPROTO when the consumer's index is
 * impossible (a hostile or corrupted peer). */
static inline int64_t rl_ring_prod_space(struct rl_ring_prod *p, uint32_t want)
{
	uint32_t cap = p->mask + 1;
	uint32_t free_ = cap - (p->head - p->cons_cache);
	if (free_ >= want)
		return free_;
	/* (P0) acquire: pairs with the consumer's release of cons (C3) */
	uint32_t cons = atomic_load_explicit(&p->hdr->cons, memory_order_acquire);
	if ((uint32_t)(p->head - cons) > cap)
		return -EPROTO;
	p->cons_cache = cons;
	return cap - (p->head - cons);
}

/* Slot i past the producer's head (0 <= i < space). */
static inline void *rl_ring_prod_slot(struct rl_ring_prod *p, uint32_t i)
{
	return p->slots + (size_t)((p->head + i) & p->mask) * p->slot_size;
}

/* The slot number (0 .. cap-1) of slot i past the producer's head: where a companion array
 * kept slot for slot with the ring (the log-probability slab) holds that slot's data. */
static inline uint32_t rl_ring_prod_index(const struct rl_ring_prod *p, uint32_t i)
{
	return (p->head + i) & p->mask;
}

/* Make n written slots visible. */
static inline void rl_ring_prod_publish(struct rl_ring_prod *p, uint32_t n)
{
	p->head += n;
	/* (P2) release: pairs with the consumer's acquire of prod (C1) */
	atomic_store_explicit(&p->hdr->prod, p->head, memory_order_release);
}

/* Slots ready for the consumer, or -EPROTO when the producer's index is impossible. */
static inline int64_t rl_ring_cons_avail(struct rl_ring_cons *c)
{
	uint32_t avail = c->prod_cache - c->tail;
	if (avail)
		return avail;
	/* (C1) acquire: pairs with the producer's release of prod (P2) */
	uint32_t prod = atomic_load_explicit(&c->hdr->prod, memory_order_acquire);
	if ((uint32_t)(prod - c->tail) > c->mask + 1)
		return -EPROTO;
	c->prod_cache = prod;
	return prod - c->tail;
}

static inline const void *rl_ring_cons_slot(const struct rl_ring_cons *c, uint32_t i)
{
	return c->slots + (size_t)((c->tail + i) & c->mask) * c->slot_size;
}

/* The slot number of the consumer's slot i (as rl_ring_prod_index). */
static inline uint32_t rl_ring_cons_index(const struct rl_ring_cons *c, uint32_t i)
{
	return (c->tail + i) & c->mask;
}

/* Hand n read slots back to the producer. */
static inline void rl_ring_cons_release(struct rl_ring_cons *c, uint32_t n)
{
	c->tail += n;
	/* (C3) release: pairs with the producer's acquire of cons (P0) */
	atomic_store_explicit(&c->hdr->cons, c->tail, memory_order_release);
}

/* Producer-side count of slots the consumer has not released yet (refreshes the cache). */
static inline int64_t rl_ring_prod_pending(struct rl_ring_prod *p)
{
	int64_t s = rl_ring_prod_space(p, p->mask + 1);
	return s < 0 ? s : (int64_t)(p->mask + 1) - s;
}
#endif
