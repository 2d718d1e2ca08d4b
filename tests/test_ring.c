/* test_ring.c — the SPSC ring: geometry, wrap-around, batch publish, rejection of impossible
 * peer indices, and a two-thread stress that TSan checks for the memory-ordering protocol.
 * Tests: ipc (rl_ring.h).
 */
#include <pthread.h>
#include <stdint.h>
#include "tests/rl_test.h"
#include "ipc/rl_ring.h"
#include "ipc/rl_wire.h"

enum { CAP = 8 };
static struct { struct rl_ring_hdr h; uint64_t slots[CAP]; } R;

static void ring_fill_drain_wrap(void)
{
	struct rl_ring_prod p;
	struct rl_ring_cons c;
	rl_ring_hdr_init(&R.h);
	rl_ring_prod_init(&p, &R.h, R.slots, CAP, 8);
	rl_ring_cons_init(&c, &R.h, R.slots, CAP, 8);
	uint64_t next_in = 0, next_out = 0;
	for (int round = 0; round < 1000; round++) {
		int64_t sp = rl_ring_prod_space(&p, CAP);
		CHECK(sp >= 0 && sp <= CAP);
		uint32_t n = (uint32_t)(round % (CAP + 1));
		if (n > sp)
			n = (uint32_t)sp;
		for (uint32_t i = 0; i < n; i++)
			*(uint64_t *)rl_ring_prod_slot(&p, i) = next_in++;
		rl_ring_prod_publish(&p, n);
		/* avail answers from its cache while that is non-empty, so it may report fewer
		 * than are published, never more, and never zero while some are */
		int64_t av = rl_ring_cons_avail(&c);
		CHECK(av <= (int64_t)(next_in - next_out) && (av > 0) == (next_in > next_out));
		uint32_t take = (uint32_t)(av > 3 ? av - 3 * (round & 1) : av);
		for (uint32_t i = 0; i < take; i++)
			CHECK(*(const uint64_t *)rl_ring_cons_slot(&c, i) == next_out + i);
		next_out += take;
		rl_ring_cons_release(&c, take);
	}
	CHECK(next_in > 1000);   /* wrapped the 8-slot ring many times */
}

static void ring_full_means_full(void)
{
	struct rl_ring_prod p;
	struct rl_ring_cons c;
	rl_ring_hdr_init(&R.h);
	rl_ring_prod_init(&p, &R.h, R.slots, CAP, 8);
	rl_ring_cons_init(&c, &R.h, R.slots, CAP, 8);
	CHECK(rl_ring_prod_space(&p, 1) == CAP);
	rl_ring_prod_publish(&p, CAP);
	CHECK(rl_ring_prod_space(&p, 1) == 0);
	CHECK(rl_ring_cons_avail(&c) == CAP);
	rl_ring_cons_release(&c, 1);
	CHECK(rl_ring_prod_space(&p, 1) == 1);
	CHECK(rl_ring_cons_avail(&c) == CAP - 1);
}

/* A peer that writes an index implying more than capacity is rejected, never trusted. */
static void ring_rejects_impossible_indices(void)
{
	struct rl_ring_prod p;
	struct rl_ring_cons c;
	rl_ring_hdr_init(&R.h);
	rl_ring_cons_init(&c, &R.h, R.slots, CAP, 8);
	atomic_store(&R.h.prod, CAP + 1);
	CHECK(rl_ring_cons_avail(&c) == -EPROTO);
	atomic_store(&R.h.prod, (uint32_t)-1);
	CHECK(rl_ring_cons_avail(&c) == -EPROTO);
	atomic_store(&R.h.prod, CAP);
	CHECK(rl_ring_cons_avail(&c) == CAP);

	rl_ring_hdr_init(&R.h);
	rl_ring_prod_init(&p, &R.h, R.slots, CAP, 8);
	rl_ring_prod_publish(&p, 2);
	atomic_store(&R.h.cons, 5);            /* consumer claims to have read more than exists */
	CHECK(rl_ring_prod_space(&p, CAP) == -EPROTO);
	atomic_store(&R.h.cons, 1);
	CHECK(rl_ring_prod_space(&p, CAP) == CAP - 1);
}

/* free-running indices wrap past 2^32 */
static void ring_index_wraps_u32(void)
{
	struct rl_ring_prod p;
	struct rl_ring_cons c;
	rl_ring_prod_init(&p, &R.h, R.slots, CAP, 8);
	rl_ring_cons_init(&c, &R.h, R.slots, CAP, 8);
	uint32_t start = UINT32_MAX - 3;
	p.head = p.cons_cache = c.tail = c.prod_cache = start;
	atomic_store(&R.h.prod, start);
	atomic_store(&R.h.cons, start);
	for (uint64_t i = 0; i < 20; i++) {
		CHECK(rl_ring_prod_space(&p, CAP) == CAP);
		*(uint64_t *)rl_ring_prod_slot(&p, 0) = i;
		rl_ring_prod_publish(&p, 1);
		CHECK(rl_ring_cons_avail(&c) == 1);
		CHECK(*(const uint64_t *)rl_ring_cons_slot(&c, 0) == i);
		rl_ring_cons_release(&c, 1);
	}
}

/* Two threads, a million records, batched both sides: order and values intact. */
enum { BIG = 256 };
static struct { struct rl_ring_hdr h; struct rl_evt slots[BIG]; } T;
static uint64_t stress_n;

static void *producer(void *arg)
{
	struct rl_ring_prod p;
	rl_ring_prod_init(&p, &T.h, T.slots, BIG, sizeof(struct rl_evt));
	uint64_t i = 0;
	while (i < stress_n) {
		int64_t sp = rl_ring_prod_space(&p, 1);
		uint32_t n = (uint32_t)(sp < 7 ? sp : 7);
		if (n > stress_n - i)
			n = (uint32_t)(stress_n - i);
		for (uint32_t k = 0; k < n; k++) {
			struct rl_evt *e = rl_ring_prod_slot(&p, k);
			e->rid = (uint32_t)(i + k);
			e->token = (uint32_t)((i + k) * 2654435761u);
		}
		if (n)
			rl_ring_prod_publish(&p, n);   /* batch: one release store for n records */
		i += n;
	}
	return arg;
}

static void ring_two_thread_stress(void)
{
	stress_n = 1000000 / (getenv("RL_SLOW") ? atoi(getenv("RL_SLOW")) : 1);
	rl_ring_hdr_init(&T.h);
	struct rl_ring_cons c;
	rl_ring_cons_init(&c, &T.h, T.slots, BIG, sizeof(struct rl_evt));
	pthread_t th;
	pthread_create(&th, NULL, producer, NULL);
	uint64_t got = 0, bad = 0;
	while (got < stress_n) {
		int64_t av = rl_ring_cons_avail(&c);
		if (av < 0) {
			bad++;
			break;
		}
		for (int64_t k = 0; k < av; k++, got++) {
			const struct rl_evt *e = rl_ring_cons_slot(&c, (uint32_t)k);
			bad += e->rid != (uint32_t)got || e->token != (uint32_t)(got * 2654435761u);
		}
		rl_ring_cons_release(&c, (uint32_t)av);
	}
	pthread_join(th, NULL);
	CHECKF(bad == 0, "%llu records out of order or torn", (unsigned long long)bad);
	CHECK(got == stress_n);
}

int main(void)
{
	RUN(ring_fill_drain_wrap);
	RUN(ring_full_means_full);
	RUN(ring_rejects_impossible_indices);
	RUN(ring_index_wraps_u32);
	RUN(ring_two_thread_stress);
	TEST_MAIN_END();
}
