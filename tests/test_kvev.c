/* test_kvev.c — KV events: what the prefix cache reports (stored with its parent, removed on
 * eviction, cleared on reset; reset refused while a cached block is held), its snapshot, the
 * msgpack encoding read back with msgpack-c's own unpacker in vLLM's positional layout, and
 * the publisher end to end over a real ZeroMQ socket: the frames, the sequence numbers, and
 * the resync (AllBlocksCleared, then the whole cache, parents first) after its queue overflows.
 * Tests: runtime/sched (rl_kv observer, reset, snapshot), runtime/loop (rl_kvev).
 */
#include <errno.h>
#include <msgpack.h>
#include <zmq.h>
#include "tests/rl_test.h"
#include "runtime/sched/rl_kv.h"
#include "runtime/loop/rl_kvev.h"

/* ---- an observer that records ------------------------------------------------------- */

struct rec {
	int n_stored, n_removed, n_cleared;
	uint64_t hash[64], parent[64];
	int has_parent[64];
	uint32_t space[64], tok0[64];
	uint64_t removed[64];
};

static void r_stored(void *ctx, uint64_t h, uint64_t ph, int hp, const uint32_t *t, uint32_t space)
{
	struct rec *r = ctx;
	int i = r->n_stored++;
	r->hash[i] = h;
	r->parent[i] = ph;
	r->has_parent[i] = hp;
	r->space[i] = space;
	r->tok0[i] = t[0];
}
static void r_removed(void *ctx, uint64_t h) { struct rec *r = ctx; r->removed[r->n_removed++] = h; }
static void r_cleared(void *ctx) { ((struct rec *)ctx)->n_cleared++; }

static void fill(uint32_t *t, uint32_t n, uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = seed * 1000 + i;
}

/* registers n_blk blocks of tok in a chain from space's root, keeping their refs */
static void chain(struct rl_kv *kv, const uint32_t *tok, uint32_t n_blk, uint32_t bs, uint32_t space, uint32_t *ids)
{
	struct rl_kv_chain c;
	rl_kv_chain_root_in(&c, space);
	for (uint32_t i = 0; i < n_blk; i++) {
		ids[i] = (uint32_t)rl_kv_alloc(kv);
		rl_kv_register(kv, ids[i], tok + i * bs, rl_kv_hash(kv, &c, tok + i * bs), &c);
	}
}

static void observer_sees_stores_evictions_and_reset(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(4, 4, 1, &kv) == 0);
	struct rec r = { 0 };
	rl_kv_set_observer(kv, &(struct rl_kv_observer){ &r, r_stored, r_removed, r_cleared });
	uint32_t tok[16], ids[4];
	fill(tok, 16, 1);
	chain(kv, tok, 3, 4, 0, ids);
	CHECK(r.n_stored == 3);
	CHECK(!r.has_parent[0] && r.has_parent[1] && r.has_parent[2]);
	CHECK(r.parent[1] == r.hash[0] && r.parent[2] == r.hash[1]);   /* chained, self-consistent */
	CHECK(r.tok0[1] == tok[4] && r.space[0] == 0);
	/* a second registration of the same text (two sequences at once) is not news */
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	uint32_t dup = (uint32_t)rl_kv_alloc(kv);
	rl_kv_register(kv, dup, tok, rl_kv_hash(kv, &c, tok), &c);
	CHECK(r.n_stored == 3);
	/* held: reset refused, nothing changes */
	CHECK(rl_kv_reset(kv) == -EBUSY && r.n_cleared == 0);
	rl_kv_unref(kv, dup);
	for (int i = 2; i >= 0; i--)
		rl_kv_unref(kv, ids[i]);
	/* a new block evicts the least recently released: the chain's tail first */
	CHECK(rl_kv_alloc(kv) == dup);     /* the free one first */
	int64_t b = rl_kv_alloc(kv);
	CHECK(b == ids[2] && r.n_removed == 1 && r.removed[0] == r.hash[2]);
	rl_kv_unref(kv, (uint32_t)b);
	rl_kv_unref(kv, dup);
	CHECK(rl_kv_reset(kv) == 2 && r.n_cleared == 1 && r.n_removed == 1);
	struct rl_kv_stats st;
	rl_kv_get_stats(kv, &st);
	CHECK(st.cached == 0 && st.free == 4);
	rl_kv_chain_root(&c);
	uint32_t got[4];
	CHECK(rl_kv_lookup(kv, tok, 16, got, &c) == 0);
	rl_kv_destroy(kv);
}

static void snapshot_orders_by_depth(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(8, 2, 1, &kv) == 0);
	uint32_t tok[8], ids[4], det[2];
	fill(tok, 8, 2);
	chain(kv, tok, 3, 2, 0, ids);
	chain(kv, tok, 2, 2, RL_KV_SPACE_DETERMINISTIC, det);
	struct rl_kv_snap s[8];
	uint32_t st[16];
	uint32_t n = rl_kv_snapshot(kv, s, st);
	CHECK(n == 5);
	int seen = 0;
	for (uint32_t i = 0; i < n; i++) {
		CHECK(st[i * 2] == tok[s[i].depth * 2] && st[i * 2 + 1] == tok[s[i].depth * 2 + 1]);
		if (s[i].id == ids[2]) {
			seen++;
			CHECK(s[i].depth == 2 && s[i].parent == ids[1] && s[i].space == 0);
		}
		if (s[i].id == det[1]) {
			seen++;
			CHECK(s[i].depth == 1 && s[i].parent == det[0] && s[i].space == RL_KV_SPACE_DETERMINISTIC);
		}
	}
	CHECK(seen == 2);
	rl_kv_destroy(kv);
}

/* ---- the encoding, read back -------------------------------------------------------- */

static int is_str(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

static int64_t as_i64(const msgpack_object *o)
{
	return o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? o->via.i64 : (int64_t)o->via.u64;
}

static void encoding_is_vllms_layout(void)
{
	uint32_t t[12];
	fill(t, 12, 3);
	const uint64_t h0 = 0x8000000000000001ull, h1 = 42, h2 = 0xfedcba9876543210ull;
	struct rl_kvev_ev ev[6] = {
		{ .type = RL_KVEV_STORED, .hash = h0, .tokens = t },
		{ .type = RL_KVEV_STORED, .has_parent = 1, .hash = h1, .parent_hash = h0, .tokens = t + 4 },
		{ .type = RL_KVEV_STORED, .has_parent = 1, .space = 1, .hash = h2, .parent_hash = 7, .tokens = t + 8 },
		{ .type = RL_KVEV_REMOVED, .hash = h1 },
		{ .type = RL_KVEV_REMOVED, .hash = h0 },
		{ .type = RL_KVEV_CLEARED },
	};
	char *buf;
	size_t len;
	CHECK(rl_kvev_encode(1.5, ev, 6, 4, &buf, &len) == 4);   /* stored x2 merged, stored, removed x2, cleared */
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	REQUIRE(msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len);
	const msgpack_object *top = &u.data;
	REQUIRE(top->type == MSGPACK_OBJECT_ARRAY && top->via.array.size == 3);
	CHECK(top->via.array.ptr[0].type == MSGPACK_OBJECT_FLOAT64 && top->via.array.ptr[0].via.f64 == 1.5);
	CHECK(top->via.array.ptr[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER && top->via.array.ptr[2].via.u64 == 0);
	const msgpack_object *evs = &top->via.array.ptr[1];
	REQUIRE(evs->type == MSGPACK_OBJECT_ARRAY && evs->via.array.size == 4);
	const msgpack_object *e = evs->via.array.ptr[0].via.array.ptr;
	REQUIRE(evs->via.array.ptr[0].via.array.size == 9 && is_str(&e[0], "BlockStored"));
	CHECK(e[1].via.array.size == 2 && as_i64(&e[1].via.array.ptr[0]) == (int64_t)h0 &&
	      as_i64(&e[1].via.array.ptr[0]) < 0 && as_i64(&e[1].via.array.ptr[1]) == 42);
	CHECK(e[2].type == MSGPACK_OBJECT_NIL);                 /* a chain's first block */
	CHECK(e[3].via.array.size == 8 && e[3].via.array.ptr[5].via.u64 == t[5]);
	CHECK(e[4].via.u64 == 4 && e[5].type == MSGPACK_OBJECT_NIL && e[6].type == MSGPACK_OBJECT_NIL &&
	      e[7].type == MSGPACK_OBJECT_NIL && e[8].type == MSGPACK_OBJECT_NIL);
	e = evs->via.array.ptr[1].via.array.ptr;               /* the other space: its own block, salted */
	CHECK(as_i64(&e[1].via.array.ptr[0]) == (int64_t)h2 && as_i64(&e[2]) == 7);
	CHECK(e[8].type == MSGPACK_OBJECT_ARRAY && e[8].via.array.size == 1 &&
	      is_str(&e[8].via.array.ptr[0].via.array.ptr[0], "ringlm-deterministic"));
	e = evs->via.array.ptr[2].via.array.ptr;
	CHECK(evs->via.array.ptr[2].via.array.size == 3 && is_str(&e[0], "BlockRemoved") && e[1].via.array.size == 2);
	CHECK(evs->via.array.ptr[3].via.array.size == 1 && is_str(&evs->via.array.ptr[3].via.array.ptr[0], "AllBlocksCleared"));
	msgpack_unpacked_destroy(&u);
	free(buf);
	struct rl_kvev_ev bad = { .type = RL_KVEV_SNAPSHOT };
	CHECK(rl_kvev_encode(0, &bad, 1, 4, &buf, &len) == -EINVAL && !buf);
	CHECK(rl_kvev_encode(0, ev, 1, 0, &buf, &len) == -EINVAL);
}

/* ---- the publisher over a socket ----------------------------------------------------- */

struct got {
	int msgs, stored, removed, cleared;
	uint64_t last_seq;
	int seq_ok, topic_ok;
	int stored_after_clear;
};

/* reads messages for up to ms, counting what they hold */
static void drain(void *sub, struct got *g, int ms, const char *topic)
{
	for (int waited = 0; waited < ms;) {
		zmq_msg_t f[3];
		for (int i = 0; i < 3; i++)
			zmq_msg_init(&f[i]);
		if (zmq_msg_recv(&f[0], sub, ZMQ_DONTWAIT) < 0) {
			usleep(2000);
			waited += 2;
			continue;
		}
		zmq_msg_recv(&f[1], sub, 0);
		zmq_msg_recv(&f[2], sub, 0);
		g->topic_ok &= zmq_msg_size(&f[0]) == strlen(topic) && !memcmp(zmq_msg_data(&f[0]), topic, strlen(topic));
		uint64_t seq = 0;
		const uint8_t *sb = zmq_msg_data(&f[1]);
		for (int i = 0; i < 8 && zmq_msg_size(&f[1]) == 8; i++)
			seq = seq << 8 | sb[i];
		g->seq_ok &= zmq_msg_size(&f[1]) == 8 && (g->msgs ? seq == g->last_seq + 1 : 1);
		g->last_seq = seq;
		g->msgs++;
		msgpack_unpacked u;
		msgpack_unpacked_init(&u);
		size_t off = 0;
		if (msgpack_unpack_next(&u, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), &off) == MSGPACK_UNPACK_SUCCESS &&
		    u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 3) {
			const msgpack_object *evs = &u.data.via.array.ptr[1];
			for (uint32_t i = 0; i < evs->via.array.size; i++) {
				const msgpack_object *e = evs->via.array.ptr[i].via.array.ptr;
				if (is_str(&e[0], "BlockStored")) {
					g->stored += (int)e[1].via.array.size;
					if (g->cleared)
						g->stored_after_clear += (int)e[1].via.array.size;
				} else if (is_str(&e[0], "BlockRemoved"))
					g->removed += (int)e[1].via.array.size;
				else if (is_str(&e[0], "AllBlocksCleared"))
					g->cleared++;
			}
		}
		msgpack_unpacked_destroy(&u);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&f[i]);
	}
}

static void publisher_sends_and_resyncs(void)
{
	struct rl_kv *kv;
	REQUIRE(rl_kv_create(64, 4, 1, &kv) == 0);
	struct rl_kvev *k;
	char err[256];
	const struct rl_kvev_params p = { .endpoint = "tcp://127.0.0.1:*", .topic = "kv@pod@model", .block_size = 4,
					  .n_blocks = 64, .queue_cap = 2 };
	REQUIRE(rl_kvev_create(&p, &k, err, sizeof err) == 0);
	char ep[256];
	snprintf(ep, sizeof ep, "%s", rl_kvev_endpoint(k));
	CHECK(!strncmp(ep, "tcp://127.0.0.1:", 16) && strcmp(ep + 16, "*"));   /* the port it got */
	struct rl_kvev *k2;                /* the endpoint is taken: a clear error */
	struct rl_kvev_params p2 = p;
	p2.endpoint = ep;
	CHECK(rl_kvev_create(&p2, &k2, err, sizeof err) < 0 && strstr(err, "cannot bind"));
	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	REQUIRE(zmq_connect(sub, ep) == 0);
	usleep(200000);                    /* the subscription reaches the publisher */
	struct rl_kv_observer o;
	rl_kvev_observer(k, &o);
	rl_kv_set_observer(kv, &o);
	uint32_t tok[64 * 4], ids[64];
	fill(tok, 64 * 4, 4);
	/* 3 blocks, slowly: each goes through the two-slot queue */
	struct rl_kv_chain c;
	rl_kv_chain_root(&c);
	for (uint32_t i = 0; i < 3; i++) {
		ids[i] = (uint32_t)rl_kv_alloc(kv);
		rl_kv_register(kv, ids[i], tok + i * 4, rl_kv_hash(kv, &c, tok + i * 4), &c);
		usleep(30000);
	}
	struct got g = { .seq_ok = 1, .topic_ok = 1 };
	drain(sub, &g, 300, "kv@pod@model");
	CHECK(g.stored == 3 && g.cleared == 0 && g.seq_ok && g.topic_ok);
	/* 40 at once overflow two slots: dropped, then one snapshot announces all 43 */
	for (uint32_t i = 3; i < 43; i++) {
		ids[i] = (uint32_t)rl_kv_alloc(kv);
		rl_kv_register(kv, ids[i], tok + i * 4, rl_kv_hash(kv, &c, tok + i * 4), &c);
	}
	struct rl_kvev_stats st;
	rl_kvev_get_stats(k, &st);
	CHECK(st.dropped > 0);
	for (int i = 0; i < 200 && (rl_kvev_get_stats(k, &st), !st.resyncs); i++) {
		rl_kvev_service(k, kv);            /* as the runtime does each pass */
		usleep(5000);
	}
	CHECK(st.resyncs == 1);
	drain(sub, &g, 300, "kv@pod@model");
	CHECK(g.cleared == 1);
	CHECKF(g.stored_after_clear == 43, "%d announced after the resync", g.stored_after_clear);
	CHECK(g.seq_ok && g.topic_ok);
	rl_kv_set_observer(kv, NULL);
	rl_kvev_destroy(k);
	zmq_close(sub);
	zmq_ctx_term(ctx);
	rl_kv_destroy(kv);
}

static void bad_endpoint_is_one_clear_error(void)
{
	struct rl_kvev *k;
	char err[256];
	const struct rl_kvev_params p = { .endpoint = "nonsense://x", .topic = "t", .block_size = 16, .n_blocks = 8 };
	CHECK(rl_kvev_create(&p, &k, err, sizeof err) < 0 && strstr(err, "--kv-events nonsense://x: cannot bind"));
	const struct rl_kvev_params q = { .endpoint = "", .topic = "t", .block_size = 16, .n_blocks = 8 };
	CHECK(rl_kvev_create(&q, &k, err, sizeof err) == -EINVAL);
}

int main(void)
{
	RUN(observer_sees_stores_evictions_and_reset);
	RUN(snapshot_orders_by_depth);
	RUN(encoding_is_vllms_layout);
	RUN(publisher_sends_and_resyncs);
	RUN(bad_endpoint_is_one_clear_error);
	TEST_MAIN_END();
}
