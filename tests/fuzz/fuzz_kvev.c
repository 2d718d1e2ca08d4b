/* fuzz_kvev.c — libFuzzer harness for the KV events: a byte program of prefix-cache operations
 * (allocate, register in one of two hash spaces, release, reset) on a small pool, each change
 * the observer reports encoded (rl_kvev_encode) in batches the input cuts, and every message
 * read back with msgpack-c's unpacker. Properties: each message decodes whole as
 * [float, [events], 0] with vLLM's positional fields (BlockStored's 9, its token ids block_size
 * a hash, chained hashes inside one event); a BlockRemoved names only hashes stored since the
 * last AllBlocksCleared, each at most as often as it was stored (Dynamo's relay counts them);
 * the cache's own counts stay consistent.
 * Tests: runtime/sched (rl_kv observer, reset), runtime/loop (rl_kvev encoder).
 */
#include <errno.h>
#include <msgpack.h>
#include "tests/fuzz/fuzz_common.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/loop/rl_kvev.h"

#define NB 12                          /* pool blocks */
#define BS 2                           /* tokens a block */
#define MAXEV 64

static struct rl_kvev_ev ev[MAXEV];
static uint32_t evtok[MAXEV][BS];
static uint32_t n_ev;
static uint64_t live_h[4 * NB * 16];   /* hashes stored and not yet removed, with repeats */
static uint32_t n_live;

static void o_stored(void *c, uint64_t h, uint64_t ph, int hp, const uint32_t *t, uint32_t space)
{
	memcpy(evtok[n_ev], t, sizeof evtok[0]);
	ev[n_ev] = (struct rl_kvev_ev){ RL_KVEV_STORED, (uint32_t)hp, space, 0, h, ph, evtok[n_ev] };
	n_ev++;
}
static void o_removed(void *c, uint64_t h) { ev[n_ev++] = (struct rl_kvev_ev){ .type = RL_KVEV_REMOVED, .hash = h }; }
static void o_cleared(void *c) { ev[n_ev++] = (struct rl_kvev_ev){ .type = RL_KVEV_CLEARED }; }

static int is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static uint64_t u64_of(const msgpack_object *o)
{
	FUZZ_ASSERT(o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
	return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : (uint64_t)o->via.i64;
}

/* encodes the pending events as one message, decodes it and checks it */
static void flush(void)
{
	if (!n_ev)
		return;
	char *buf;
	size_t len;
	int runs = rl_kvev_encode(2.5, ev, n_ev, BS, &buf, &len);
	FUZZ_ASSERT(runs >= 1 && runs <= (int)n_ev);
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	FUZZ_ASSERT(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len);
	const msgpack_object *top = &u.data;
	FUZZ_ASSERT(top->type == MSGPACK_OBJECT_ARRAY && top->via.array.size == 3);
	FUZZ_ASSERT(top->via.array.ptr[0].type == MSGPACK_OBJECT_FLOAT64 && top->via.array.ptr[2].via.u64 == 0);
	const msgpack_object *evs = &top->via.array.ptr[1];
	FUZZ_ASSERT(evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size == (uint32_t)runs);
	uint32_t k = 0;                    /* the input event the next decoded block must equal */
	for (uint32_t i = 0; i < evs->via.array.size; i++) {
		const msgpack_object *e = evs->via.array.ptr[i].via.array.ptr;
		const uint32_t n = evs->via.array.ptr[i].via.array.size;
		if (is(&e[0], "BlockStored")) {
			FUZZ_ASSERT(n == 9 && e[1].type == MSGPACK_OBJECT_ARRAY && e[4].via.u64 == BS);
			const uint32_t nb = e[1].via.array.size;
			FUZZ_ASSERT(e[3].via.array.size == nb * BS);
			FUZZ_ASSERT(e[2].type == MSGPACK_OBJECT_NIL ? !ev[k].has_parent : u64_of(&e[2]) == ev[k].parent_hash);
			for (uint32_t b = 0; b < nb; b++, k++) {
				FUZZ_ASSERT(ev[k].type == RL_KVEV_STORED && u64_of(&e[1].via.array.ptr[b]) == ev[k].hash);
				for (uint32_t t = 0; t < BS; t++)
					FUZZ_ASSERT(e[3].via.array.ptr[b * BS + t].via.u64 == ev[k].tokens[t]);
				FUZZ_ASSERT(n_live < sizeof live_h / sizeof *live_h);
				live_h[n_live++] = ev[k].hash;
			}
			FUZZ_ASSERT((e[8].type == MSGPACK_OBJECT_NIL) == !ev[k - 1].space);
		} else if (is(&e[0], "BlockRemoved")) {
			FUZZ_ASSERT(n == 3);
			for (uint32_t b = 0; b < e[1].via.array.size; b++, k++) {
				const uint64_t h = u64_of(&e[1].via.array.ptr[b]);
				FUZZ_ASSERT(ev[k].type == RL_KVEV_REMOVED && h == ev[k].hash);
				uint32_t j = 0;
				while (j < n_live && live_h[j] != h)
					j++;
				FUZZ_ASSERT(j < n_live);   /* removed only what was stored, once a store */
				live_h[j] = live_h[--n_live];
			}
		} else {
			FUZZ_ASSERT(n == 1 && is(&e[0], "AllBlocksCleared") && ev[k].type == RL_KVEV_CLEARED);
			k++;
			n_live = 0;
		}
	}
	FUZZ_ASSERT(k == n_ev);
	msgpack_unpacked_destroy(&u);
	free(buf);
	n_ev = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rl_kv *kv;
	if (rl_kv_create(NB, BS, 1, &kv))
		return 0;
	rl_kv_set_observer(kv, &(struct rl_kv_observer){ NULL, o_stored, o_removed, o_cleared });
	n_ev = n_live = 0;
	uint32_t held[NB], n_held = 0;
	struct rl_kv_chain chain;
	rl_kv_chain_root(&chain);
	for (size_t i = 0; i + 1 < size; i += 2) {
		const uint8_t op = data[i] & 7, arg = data[i + 1];
		if (n_ev + 4 >= MAXEV)
			flush();
		if (op == 0) {                 /* a new chain, in space 0 or 1 */
			rl_kv_chain_root_in(&chain, arg & 1);
		} else if (op <= 2 && n_held < NB) {   /* a block of tokens from arg, registered next */
			int64_t b = rl_kv_alloc(kv);
			if (b < 0)
				continue;
			held[n_held++] = (uint32_t)b;
			const uint32_t t[BS] = { arg & 7u, (arg >> 3) & 7u };   /* few texts: hits and duplicates */
			rl_kv_register(kv, (uint32_t)b, t, rl_kv_hash(kv, &chain, t), &chain);
		} else if (op == 3 && n_held) {        /* release one (the newest or a random one) */
			uint32_t j = arg % n_held;
			rl_kv_unref(kv, held[j]);
			held[j] = held[--n_held];
		} else if (op == 4) {          /* a lookup from the root: a hit takes references */
			struct rl_kv_chain c;
			rl_kv_chain_root_in(&c, arg & 1);
			uint32_t t[4 * BS], got[4];
			for (uint32_t x = 0; x < 4 * BS; x++)
				t[x] = (arg >> (x % 4)) & 7u;
			uint32_t n = rl_kv_lookup(kv, t, 4 * BS, got, &c);
			for (uint32_t x = 0; x < n; x++)
				rl_kv_unref(kv, got[x]);
		} else if (op == 5) {
			int64_t r = rl_kv_reset(kv);
			FUZZ_ASSERT(r >= 0 || r == -EBUSY);
			struct rl_kv_stats st;
			rl_kv_get_stats(kv, &st);
			FUZZ_ASSERT(r < 0 || st.cached == 0);
		} else if (op == 6) {
			flush();
		}
	}
	flush();
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	FUZZ_ASSERT(n_live == st.cached);  /* every cached block announced once, none extra */
	while (n_held)
		rl_kv_unref(kv, held[--n_held]);
	rl_kv_destroy(kv);
	return 0;
}
