/* rl_kvev.c — KV events: the encoder (msgpack-c), the queue from the runtime thread and the
 * publisher thread (libzmq). The wire format and the threads' protocol are in rl_kvev.h. */
#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>
#include "ipc/rl_ring.h"
#include "runtime/loop/rl_kvev.h"
#include "runtime/sched/rl_kv.h"

#define BATCH 256                      /* events a message carries at most */
#define DETERMINISTIC_KEY "ringlm-deterministic"

/* ---- the encoder --------------------------------------------------------------------- */

static int continues(const struct rl_kvev_ev *a, const struct rl_kvev_ev *b)
{
	if (a->type != b->type)
		return 0;
	if (b->type == RL_KVEV_REMOVED)
		return 1;
	return b->type == RL_KVEV_STORED && b->has_parent && b->parent_hash == a->hash && b->space == a->space;
}

static void pack_key(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* one event of the run ev[0..n) (STORED blocks of one chain, REMOVED ones, or a CLEARED) */
static void pack_run(msgpack_packer *pk, const struct rl_kvev_ev *ev, uint32_t n, uint32_t bs)
{
	switch (ev->type) {
	case RL_KVEV_STORED:
		msgpack_pack_array(pk, 9);
		pack_key(pk, "BlockStored");
		msgpack_pack_array(pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_int64(pk, (int64_t)ev[i].hash);
		if (ev->has_parent)
			msgpack_pack_int64(pk, (int64_t)ev->parent_hash);
		else
			msgpack_pack_nil(pk);
		msgpack_pack_array(pk, (size_t)n * bs);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t t = 0; t < bs; t++)
				msgpack_pack_uint32(pk, ev[i].tokens[t]);
		msgpack_pack_uint32(pk, bs);
		msgpack_pack_nil(pk);          /* lora_id */
		msgpack_pack_nil(pk);          /* medium: the engine's own (only) tier */
		msgpack_pack_nil(pk);          /* lora_name */
		if (!ev->space) {
			msgpack_pack_nil(pk);  /* extra_keys */
		} else {
			msgpack_pack_array(pk, n);
			for (uint32_t i = 0; i < n; i++) {
				msgpack_pack_array(pk, 1);
				pack_key(pk, DETERMINISTIC_KEY);
			}
		}
		break;
	case RL_KVEV_REMOVED:
		msgpack_pack_array(pk, 3);
		pack_key(pk, "BlockRemoved");
		msgpack_pack_array(pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_int64(pk, (int64_t)ev[i].hash);
		msgpack_pack_nil(pk);          /* medium */
		break;
	default:
		msgpack_pack_array(pk, 1);
		pack_key(pk, "AllBlocksCleared");
	}
}

/* msgpack-c's sbuffer writer, remembering a failed write (its packers return codes per call) */
struct wbuf {
	msgpack_sbuffer sb;
	int failed;
};

static int wbuf_write(void *data, const char *buf, size_t len)
{
	struct wbuf *w = data;
	if (!w->failed && msgpack_sbuffer_write(&w->sb, buf, len))
		w->failed = 1;
	return 0;
}

int rl_kvev_encode(double ts, const struct rl_kvev_ev *ev, uint32_t n, uint32_t block_size,
		   char **out, size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	if (!block_size)
		return -EINVAL;
	uint32_t runs = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (ev[i].type < RL_KVEV_STORED || ev[i].type > RL_KVEV_CLEARED ||
		    (ev[i].type == RL_KVEV_STORED && !ev[i].tokens))
			return -EINVAL;
		runs += !i || !continues(&ev[i - 1], &ev[i]);
	}
	struct wbuf w = { .failed = 0 };
	msgpack_sbuffer_init(&w.sb);
	msgpack_packer pk;
	msgpack_packer_init(&pk, &w, wbuf_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, ts);
	msgpack_pack_array(&pk, runs);
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i + 1;
		while (j < n && continues(&ev[j - 1], &ev[j]))
			j++;
		pack_run(&pk, ev + i, j - i, block_size);
		i = j;
	}
	msgpack_pack_int32(&pk, 0);            /* data-parallel rank */
	if (w.failed) {
		msgpack_sbuffer_destroy(&w.sb);
		return -ENOMEM;
	}
	*out_len = w.sb.size;
	*out = msgpack_sbuffer_release(&w.sb);
	return (int)runs;
}

/* ---- the queue and the publisher ------------------------------------------------------- */

struct kvq {                           /* one ring slot; its tokens are tok[slot x block_size] */
	uint32_t type, has_parent, space, _pad;
	uint64_t hash, parent_hash;
};

struct rl_kvev {
	struct rl_ring_hdr hdr;        /* first: aligned as it asks */
	struct rl_ring_prod prod;      /* the runtime thread's */
	struct rl_ring_cons cons;      /* the publisher's */
	struct kvq *slots;
	uint32_t *tok;
	uint32_t bs, n_blocks;
	int lost;                      /* runtime thread: dropping until the next snapshot */
	_Atomic int snap_busy;         /* 1 from a snapshot's fill until the publisher sent it */
	struct rl_kv_snap *snap;       /* [n_blocks], with its tokens, its count */
	uint32_t *snap_tok, snap_n;
	uint32_t *order;               /* publisher: the snapshot's order, parents first */
	struct rl_kvev_ev *batch;      /* publisher: [BATCH] */
	char *topic;
	char endpoint[256];            /* ZMQ_LAST_ENDPOINT */
	void *zctx, *pub;
	uint64_t seq;
	pthread_t th;
	_Atomic int stop;
	_Atomic uint64_t sent, msgs, dropped, resyncs;
};

static double wall_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* one message of ev[0..n): topic, sequence number, payload */
static void send_batch(struct rl_kvev *k, const struct rl_kvev_ev *ev, uint32_t n)
{
	if (!n)
		return;
	char *buf;
	size_t len;
	if (rl_kvev_encode(wall_s(), ev, n, k->bs, &buf, &len) < 0) {
		atomic_fetch_add_explicit(&k->dropped, n, memory_order_relaxed);
		return;
	}
	uint8_t seq[8];
	for (int i = 0; i < 8; i++)
		seq[i] = (uint8_t)(k->seq >> (56 - 8 * i));
	k->seq++;
	/* a PUB socket never blocks: a subscriber past its high-water mark loses messages */
	zmq_send(k->pub, k->topic, strlen(k->topic), ZMQ_SNDMORE);
	zmq_send(k->pub, seq, sizeof seq, ZMQ_SNDMORE);
	zmq_send(k->pub, buf, len, 0);
	free(buf);
	atomic_fetch_add_explicit(&k->sent, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->msgs, 1, memory_order_relaxed);
}

static int by_depth(const void *a, const void *b, void *snap)
{
	const struct rl_kv_snap *s = snap, *x = &s[*(const uint32_t *)a], *y = &s[*(const uint32_t *)b];
	return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* The marker: AllBlocksCleared, then every cached block of the snapshot, parents before
 * children. A block whose parent has left the cache is announced too, though no lookup reaches
 * it: its eviction will send a BlockRemoved, and Dynamo's relay counts stores and removals of
 * a hash, so each removal must follow exactly one store. Then the buffer goes back. */
static void resync(struct rl_kvev *k)
{
	const uint32_t n = k->snap_n;
	struct rl_kvev_ev *b = k->batch;
	b[0] = (struct rl_kvev_ev){ .type = RL_KVEV_CLEARED };
	uint32_t m = 1;
	for (uint32_t i = 0; i < n; i++)
		k->order[i] = i;
	qsort_r(k->order, n, sizeof *k->order, by_depth, k->snap);
	for (uint32_t i = 0; i < n; i++) {
		const struct rl_kv_snap *s = &k->snap[k->order[i]];
		b[m++] = (struct rl_kvev_ev){ .type = RL_KVEV_STORED, .has_parent = s->parent != RL_KV_NONE,
					      .space = s->space, .hash = s->hash, .parent_hash = s->parent_hash,
					      .tokens = k->snap_tok + (size_t)k->order[i] * k->bs };
		if (m == BATCH) {
			send_batch(k, b, m);
			m = 0;
		}
	}
	send_batch(k, b, m);
	atomic_fetch_add_explicit(&k->resyncs, 1, memory_order_relaxed);
	atomic_store_explicit(&k->snap_busy, 0, memory_order_release);
}

static void *publisher(void *arg)
{
	struct rl_kvev *k = arg;
	long idle_us = 1000;
	for (;;) {
		int64_t n = rl_ring_cons_avail(&k->cons);
		if (n <= 0) {
			if (atomic_load_explicit(&k->stop, memory_order_acquire)) {
				if (rl_ring_cons_avail(&k->cons) > 0)
					continue;   /* pushed just before the stop */
				break;
			}
			/* idle: poll every 1 ms after events, backing off to 20 ms (a router hears of a
			 * change within a step or two, and an idle daemon wakes 50 times a second) */
			struct timespec t = { 0, idle_us * 1000 };
			nanosleep(&t, NULL);
			idle_us = idle_us * 2 > 20000 ? 20000 : idle_us * 2;
			continue;
		}
		idle_us = 1000;
		uint32_t m = 0, i = 0;
		for (; i < (uint32_t)n && m < BATCH; i++) {
			const struct kvq *q = rl_ring_cons_slot(&k->cons, i);
			if (q->type == RL_KVEV_SNAPSHOT) {
				send_batch(k, k->batch, m);   /* what came before the marker, first */
				m = 0;
				resync(k);
				continue;
			}
			k->batch[m++] = (struct rl_kvev_ev){ .type = q->type, .has_parent = q->has_parent,
				.space = q->space, .hash = q->hash, .parent_hash = q->parent_hash,
				.tokens = q->type == RL_KVEV_STORED ?
					  k->tok + (size_t)rl_ring_cons_index(&k->cons, i) * k->bs : NULL };
		}
		send_batch(k, k->batch, m);
		rl_ring_cons_release(&k->cons, i);     /* the tokens were read in place */
	}
	return NULL;
}

/* ---- the runtime thread's side ------------------------------------------------------- */

static void push(struct rl_kvev *k, uint32_t type, uint64_t h, uint64_t ph, int has_parent,
		 const uint32_t *tokens, uint32_t space)
{
	if (k->lost || rl_ring_prod_space(&k->prod, 1) < 1) {
		k->lost = 1;           /* the snapshot will say what this event would have */
		atomic_fetch_add_explicit(&k->dropped, 1, memory_order_relaxed);
		return;
	}
	struct kvq *q = rl_ring_prod_slot(&k->prod, 0);
	*q = (struct kvq){ type, (uint32_t)has_parent, space, 0, h, ph };
	if (tokens)
		memcpy(k->tok + (size_t)rl_ring_prod_index(&k->prod, 0) * k->bs, tokens, k->bs * sizeof *tokens);
	rl_ring_prod_publish(&k->prod, 1);
}

static void on_stored(void *ctx, uint64_t h, uint64_t ph, int has_parent, const uint32_t *tokens,
		      uint32_t space)
{
	push(ctx, RL_KVEV_STORED, h, ph, has_parent, tokens, space);
}

static void on_removed(void *ctx, uint64_t h)
{
	push(ctx, RL_KVEV_REMOVED, h, 0, 0, NULL, 0);
}

static void on_cleared(void *ctx)
{
	push(ctx, RL_KVEV_CLEARED, 0, 0, 0, NULL, 0);
}

void rl_kvev_observer(struct rl_kvev *k, struct rl_kv_observer *o)
{
	*o = (struct rl_kv_observer){ k, on_stored, on_removed, on_cleared };
}

void rl_kvev_service(struct rl_kvev *k, const struct rl_kv *kv)
{
	if (!k->lost || atomic_load_explicit(&k->snap_busy, memory_order_acquire) ||
	    rl_ring_prod_space(&k->prod, 1) < 1)
		return;
	k->snap_n = rl_kv_snapshot(kv, k->snap, k->snap_tok);
	atomic_store_explicit(&k->snap_busy, 1, memory_order_relaxed);
	k->lost = 0;
	push(k, RL_KVEV_SNAPSHOT, 0, 0, 0, NULL, 0);   /* its release publishes the snapshot too */
}

void rl_kvev_get_stats(const struct rl_kvev *k, struct rl_kvev_stats *st)
{
	struct rl_kvev *m = (struct rl_kvev *)k;
	st->sent = atomic_load_explicit(&m->sent, memory_order_relaxed);
	st->msgs = atomic_load_explicit(&m->msgs, memory_order_relaxed);
	st->dropped = atomic_load_explicit(&m->dropped, memory_order_relaxed);
	st->resyncs = atomic_load_explicit(&m->resyncs, memory_order_relaxed);
}

static void release(struct rl_kvev *k)
{
	if (k->pub)
		zmq_close(k->pub);
	if (k->zctx)
		zmq_ctx_term(k->zctx);
	free(k->slots);
	free(k->tok);
	free(k->snap);
	free(k->snap_tok);
	free(k->order);
	free(k->batch);
	free(k->topic);
	free(k);
}

int rl_kvev_create(const struct rl_kvev_params *p, struct rl_kvev **out, char *err, size_t errlen)
{
	uint32_t cap = p->queue_cap ? p->queue_cap : 16384;
	if (!p->endpoint || !*p->endpoint || !p->topic || !p->block_size || !p->n_blocks || (cap & (cap - 1))) {
		snprintf(err, errlen, "--kv-events needs an endpoint such as tcp://127.0.0.1:5557");
		return -EINVAL;
	}
	struct rl_kvev *k = aligned_alloc(2 * RL_CACHELINE, (sizeof *k + 2 * RL_CACHELINE - 1) & ~(size_t)(2 * RL_CACHELINE - 1));
	if (!k) {
		snprintf(err, errlen, "out of memory for the KV-event publisher");
		return -ENOMEM;
	}
	memset(k, 0, sizeof *k);
	k->bs = p->block_size;
	k->n_blocks = p->n_blocks;
	k->slots = calloc(cap, sizeof *k->slots);
	k->tok = calloc((size_t)cap * k->bs, sizeof *k->tok);
	k->snap = calloc(p->n_blocks, sizeof *k->snap);
	k->snap_tok = calloc((size_t)p->n_blocks * k->bs, sizeof *k->snap_tok);
	k->order = calloc(p->n_blocks, sizeof *k->order);
	k->batch = calloc(BATCH, sizeof *k->batch);
	k->topic = strdup(p->topic);
	if (!k->slots || !k->tok || !k->snap || !k->snap_tok || !k->order || !k->batch || !k->topic) {
		release(k);
		snprintf(err, errlen, "out of memory for the KV-event publisher (%u blocks of %u tokens)", p->n_blocks,
			 p->block_size);
		return -ENOMEM;
	}
	rl_ring_hdr_init(&k->hdr);
	rl_ring_prod_init(&k->prod, &k->hdr, k->slots, cap, sizeof *k->slots);
	rl_ring_cons_init(&k->cons, &k->hdr, k->slots, cap, sizeof *k->slots);
	int linger = 1000;                     /* destroy: queued messages get a second to leave */
	if (!(k->zctx = zmq_ctx_new()) || !(k->pub = zmq_socket(k->zctx, ZMQ_PUB)) ||
	    zmq_setsockopt(k->pub, ZMQ_LINGER, &linger, sizeof linger) || zmq_bind(k->pub, p->endpoint)) {
		int e = zmq_errno();
		snprintf(err, errlen, "--kv-events %s: cannot bind (%s); give a free tcp://HOST:PORT or ipc://PATH",
			 p->endpoint, zmq_strerror(e));
		release(k);
		return -(e > 0 ? e : EINVAL);
	}
	size_t el = sizeof k->endpoint - 1;
	if (zmq_getsockopt(k->pub, ZMQ_LAST_ENDPOINT, k->endpoint, &el))
		snprintf(k->endpoint, sizeof k->endpoint, "%s", p->endpoint);
	int e = pthread_create(&k->th, NULL, publisher, k);
	if (e) {
		snprintf(err, errlen, "cannot start the KV-event publisher thread (%s)", strerror(e));
		release(k);
		return -e;
	}
	*out = k;
	return 0;
}

const char *rl_kvev_endpoint(const struct rl_kvev *k)
{
	return k->endpoint;
}

void rl_kvev_destroy(struct rl_kvev *k)
{
	if (!k)
		return;
	atomic_store_explicit(&k->stop, 1, memory_order_release);
	pthread_join(k->th, NULL);
	release(k);
}
