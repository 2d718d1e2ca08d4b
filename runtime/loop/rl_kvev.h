/* rl_kvev.h — KV events: the prefix cache's changes, published over ZeroMQ in vLLM's format so
 * that fleet routers (NVIDIA Dynamo's KV router, llm-d's KV-cache indexer) know which prompt
 * prefixes this runtime holds.
 *
 * Wire (vLLM's ZmqEventPublisher, which both routers read): a PUB socket bound at the endpoint
 * (any number of subscribers connect to it); each message is three frames: the topic
 * ("kv@<pod>@<model>"), an 8-byte big-endian sequence number (0, 1, ... per message), and a
 * msgpack array [timestamp (float seconds since the epoch), [events...], data-parallel rank 0].
 * Events are msgspec's array-like tagged structs:
 *   ["BlockStored", block_hashes, parent_hash, token_ids, block_size, lora_id, medium,
 *    lora_name, extra_keys]
 *   ["BlockRemoved", block_hashes, medium]
 *   ["AllBlocksCleared"]
 * Full blocks only, each with its block_size token ids; consecutive blocks of one chain are one
 * BlockStored (parent_hash names the block before the first; nil for a chain's first block).
 * lora_id, medium and lora_name are nil (one model, one tier). Hashes are rl_kv's chained
 * 64-bit content hashes sent as the signed 64-bit integer with the same bits (two's
 * complement): self-consistent, since a block's hash is also its children's parent_hash and
 * its BlockRemoved's. Blocks of the deterministic mode's separate hash space carry
 * extra_keys [["ringlm-deterministic"]] per block, as a cache_salt would, so a router that
 * hashes tokens itself keeps them apart from the ordinary blocks of the same text.
 *
 * Threads: the runtime thread reports changes through the rl_kv observer (rl_kvev_observer):
 * a copy into a bounded single-producer ring (ipc/rl_ring.h's protocol, in process memory),
 * no lock, no syscall, never a wait. The publisher thread drains it, encodes (msgpack-c) and
 * sends (libzmq). When the ring is full the runtime drops that event and every later one
 * until the publisher has caught up; then, once per loop pass (rl_kvev_service), it copies the
 * whole cache into the snapshot buffer (rl_kv_snapshot: one pass over the pool) and queues a
 * marker; at the marker the publisher sends AllBlocksCleared and announces every cached block
 * again, parents first. The ring's release/acquire pair orders the snapshot's
 * stores before the publisher's reads; the publisher hands the buffer back with a release
 * store of snap_busy, which the runtime loads with acquire before filling it again.
 */
#ifndef RL_KVEV_H
#define RL_KVEV_H
#include <stddef.h>
#include <stdint.h>

struct rl_kv;
struct rl_kv_observer;
struct rl_kvev;

/* One event as the encoder takes it. */
enum rl_kvev_type { RL_KVEV_STORED = 1, RL_KVEV_REMOVED = 2, RL_KVEV_CLEARED = 3,
		    RL_KVEV_SNAPSHOT = 4 /* the queue's resync marker; never encoded */ };
struct rl_kvev_ev {
	uint32_t type;                 /* enum rl_kvev_type */
	uint32_t has_parent;           /* STORED: 0 for a chain's first block */
	uint32_t space;                /* STORED: rl_kv's hash space (0 ordinary, else its own) */
	uint32_t _pad;
	uint64_t hash, parent_hash;
	const uint32_t *tokens;        /* STORED: block_size ids */
};

/* Encodes one message's payload, [ts, [events], 0], of events ev[0..n) into a malloc'd buffer
 * (*out, *out_len; the caller frees it), merging consecutive STORED blocks of one chain and
 * consecutive REMOVED ones. Returns how many events it wrote after merging, or -errno
 * (-EINVAL for a type it does not encode or block_size 0, -ENOMEM). */
int rl_kvev_encode(double ts, const struct rl_kvev_ev *ev, uint32_t n, uint32_t block_size,
		   char **out, size_t *out_len);

struct rl_kvev_params {
	const char *endpoint;          /* where the PUB socket binds: tcp://HOST:PORT, ipc://PATH */
	const char *topic;             /* the messages' first frame */
	uint32_t block_size;
	uint32_t n_blocks;             /* the pool: the snapshot's room */
	uint32_t queue_cap;            /* ring slots (a power of two); 0 = 16384 */
};

struct rl_kvev_stats {
	uint64_t sent, msgs, dropped, resyncs;
};

/* Binds the socket and starts the publisher thread. -errno with the reason in err (a bad
 * endpoint or one in use, out of memory). */
int  rl_kvev_create(const struct rl_kvev_params *p, struct rl_kvev **out, char *err, size_t errlen);
/* The endpoint bound, as ZeroMQ reports it (a port given as * resolved). */
const char *rl_kvev_endpoint(const struct rl_kvev *k);
/* Sends what is queued (within about a second), stops the thread, closes the socket. */
void rl_kvev_destroy(struct rl_kvev *k);
/* The observer the runtime gives its prefix cache (rl_sched_kv_observe). */
void rl_kvev_observer(struct rl_kvev *k, struct rl_kv_observer *o);
/* Runtime thread, once per loop pass: after an overflow, snapshots kv for the publisher when
 * it is ready for one (cost: one pass over the pool; otherwise a branch). */
void rl_kvev_service(struct rl_kvev *k, const struct rl_kv *kv);
void rl_kvev_get_stats(const struct rl_kvev *k, struct rl_kvev_stats *st);

#endif
