/* rl_wire.h — everything runtime and clients share byte for byte: the attach handshake, the
 * per-client segment layout, request and event records, and the read-only info segment.
 *
 * Per-client segment (memfd, sealed against resizing; mapped read-write by both sides):
 *   [0]            struct rl_seg_hdr   geometry, written once by the runtime before handing the
 *                                      fd over; the runtime keeps its own private copy and never
 *                                      reads this back
 *   [ctl_off]      struct rl_seg_ctl   doorbells and the client's sleeping flag
 *   [req_off]      request ring: rl_ring_hdr, then req_cap × struct rl_req
 *   [evt_off]      event ring:   rl_ring_hdr, then evt_cap × struct rl_evt
 *   [lp_off]       log-probability slab: evt_cap × struct rl_lp, slot for slot with the event
 *                  ring: a TOKEN (or PROMPT) event of a request that asked for log-probabilities
 *                  (rl_req.logprobs) has them in the slab slot of its event slot. The runtime
 *                  writes that slot before it publishes the event (the ring's P1), the client
 *                  reads it after acquiring the event and before releasing it (C2), so the
 *                  ring's own release/acquire pairs order the slab too, and a slot is reused
 *                  only after its event is released (P0). Events of other requests leave their
 *                  slab slot untouched (nothing is written or read when log-probabilities are off).
 *   [arena_off]    prompt arena: arena_size bytes of uint32 token ids, written by the client;
 *                  a request names [arena_pos, arena_pos + n_prompt) modulo the arena (in ids)
 *
 * Info segment (memfd, F_SEAL_FUTURE_WRITE: clients can only map it read-only): struct
 * rl_info, then the model's vocabulary blob at vocab_off (vocab_size_bytes; none when 0), in
 * one of the two formats tokenizer/ reads (tokenizer/rl_tok.h tells them apart by the magic):
 *   SentencePiece (Llama 1/2, Mistral, Gemma): llama2.c's tokenizer.bin, little-endian:
 *     i32 max_token_length, then per token: f32 score, i32 len, len bytes; from a GGUF, a
 *     trailer after them (token types, flags, BOS, EOS, "RLS2": tokenizer/rl_tok.h);
 *   byte-level BPE (Llama 3, Qwen2, GPT-2 ...): "RLB1" (tokenizer/rl_bpe.h has the layout):
 *     header, the pre-tokenizer's expressions, the tokens with their types, the merges by rank.
 *
 * Doorbells (Dekker-style; seq_cst fences order each side's store before its load):
 *   client → runtime: the client publishes a request (ring release), fence, then reads
 *     info->rt_sleeping; if set it bumps ctl->rt_bell and wakes the runtime (FUTEX_WAKE on
 *     rt_bell, or an eventfd write in fallback mode). The runtime, before sleeping, stores
 *     rt_sleeping = 1, fences, re-checks every request ring, and only then waits (futex wait
 *     on each rt_bell with the value read before the re-check, or eventfd poll).
 *   runtime → client: the runtime publishes events, fence, reads ctl->cl_sleeping; if set it
 *     bumps cl_bell and wakes the client. The client stores cl_sleeping = 1, fences,
 *     re-checks its event ring, then sleeps on cl_bell (or its eventfd).
 */
#ifndef RL_WIRE_H
#define RL_WIRE_H
#include <stdatomic.h>
#include <stdint.h>
#include "ipc/rl_ring.h"

#define RL_WIRE_MAGIC   0x4d4c4752u  /* "RGLM" */
#define RL_WIRE_VERSION 12u         /* 2: observer attach, refusal counters; 3: chat template family;
				     * 4: the budget's five-feature step model, margin, calibration;
				     * 5: log-probabilities (rl_req.logprobs, the slab beside the event ring);
				     * 6: speculative decoding (rl_req.no_spec, spec_* info stats);
				     * 7: the chat template's default system turn (rl_info.chat_system);
				     * 8: constraints (rl_req.cons_kind, cons_len);
				     * 9: the deterministic mode (rl_req.deterministic,
				     * rl_info.deterministic); 10: RL_OP_RESET_CACHE, the queue-time
				     * histogram and the KV-event counters in rl_info_stats;
				     * 11: the running cap and overload refusals (max_running,
				     * overloaded, max_queue_ns), the step model's sixth term
				     * (coef_prompt_ps); 12: the constraint compiler's counters
				     * (cons_*) */
#define RL_MAX_TOP_LOGPROBS 20       /* alternatives a token's log-probabilities list (rl_lp) */
#define RL_MAX_STOP_IDS 8            /* stop ids per request (rl_req.stop, rl_seq.stop) */
#define RL_MAX_CONS_BYTES 65536      /* a constraint's text (rl_req.cons_len) */
/* What a request's constraint text is (rl_req.cons_kind; structured output, constrain/) */
enum rl_cons_kind { RL_CONS_NONE = 0, RL_CONS_KIND_REGEX = 1, RL_CONS_KIND_JSON_SCHEMA = 2, RL_CONS_KIND_GBNF = 3 };

/* Event types and finish codes: the numbers on the wire (rl_evt.type, rl_evt.code). The
 * scheduler emits them; clients/ringlm.h publishes the same values as RINGLM_EV_* and
 * RINGLM_FIN_*, tied to these by _Static_asserts in clients/libringlm.c. */
enum rl_ev_type { RL_EV_TOKEN = 1, RL_EV_DONE = 2, RL_EV_ERROR = 3,
		  RL_EV_PROMPT = 4 /* a prompt token's log-probabilities (rl_req.prompt_logprobs): token,
				    * index its position (1 ..), the slab slot its numbers */ };
enum rl_finish { RL_FIN_LENGTH = 1, RL_FIN_STOP = 2, RL_FIN_EOS = 3, RL_FIN_CTX = 4,
		 RL_FIN_CANCEL = 5 };

/* ---- attach handshake (control socket, SOCK_STREAM) ---------------------------------- */
struct rl_attach_req {
	uint32_t magic, version;
	uint32_t flags;                /* RL_ATTACH_* */
	uint32_t _pad;
};
#define RL_ATTACH_FALLBACK 1u          /* ask for eventfd wake-ups even if futex waits work */
#define RL_ATTACH_OBSERVE  2u          /* info and stats only: no rings, takes no client slot */

struct rl_attach_rep {
	uint32_t magic, version;
	int32_t  status;               /* 0, or -errno (then msg says why and no fds follow) */
	uint32_t client_id;
	uint64_t seg_size, info_size;
	char     msg[176];             /* NUL-terminated, one line */
};
/* With status 0 the reply carries 4 fds (SCM_RIGHTS): segment memfd, info memfd (read-only),
 * the runtime's eventfd (client writes to wake it), the client's eventfd (runtime writes).
 * An observer (RL_ATTACH_OBSERVE) gets status 0, seg_size 0 and the info memfd alone; the
 * runtime then closes the connection, so observers never hold a client slot. */

/* ---- per-client segment -------------------------------------------------------------- */
struct rl_seg_hdr {
	uint32_t magic, version;
	uint32_t client_id;
	uint32_t wake_mode;            /* RL_WAKE_FUTEX or RL_WAKE_EVENTFD */
	uint64_t seg_size;
	uint32_t ctl_off;
	uint32_t req_off, req_cap;     /* ring header offset; slots follow it */
	uint32_t evt_off, evt_cap;
	uint32_t lp_off;               /* the log-probability slab: evt_cap × struct rl_lp */
	uint32_t arena_off, arena_ids; /* arena size in uint32 ids (power of two) */
	uint32_t max_inflight;         /* request ids are < max_inflight */
	uint32_t max_prompt, max_new;
};
enum { RL_WAKE_FUTEX = 1, RL_WAKE_EVENTFD = 2 };

struct rl_seg_ctl {
	_Alignas(2 * RL_CACHELINE) _Atomic uint32_t rt_bell;     /* client bumps to wake runtime */
	uint8_t _pad0[2 * RL_CACHELINE - 4];
	_Alignas(2 * RL_CACHELINE) _Atomic uint32_t cl_bell;     /* runtime bumps to wake client */
	_Atomic uint32_t cl_sleeping;  /* client: 1 while (about to be) asleep */
	uint8_t _pad1[2 * RL_CACHELINE - 8];
};

/* RL_OP_RESET_CACHE empties the prefix cache (vLLM's reset_prefix_cache): it takes a request id
 * like a submit and is answered on it, RL_EV_DONE (code 0) or RL_EV_ERROR (-EBUSY while a
 * request holds cached blocks: retry when they finish); no other field is read. */
enum rl_req_op { RL_OP_SUBMIT = 1, RL_OP_CANCEL = 2, RL_OP_RESET_CACHE = 3 };

/* One request record, 128 bytes. Every field is untrusted input to the runtime. */
struct rl_req {
	uint32_t op;                   /* enum rl_req_op */
	uint32_t rid;                  /* request id chosen by the client, < max_inflight */
	uint64_t tag;                  /* echoed in events */
	uint32_t arena_pos;            /* first prompt id in the arena (mod arena_ids) */
	uint32_t n_prompt;
	uint32_t max_new;
	uint32_t top_k;
	float    temperature;
	float    top_p;
	uint64_t seed;
	int32_t  priority;
	uint32_t n_stop;
	uint64_t deadline_ns;
	uint32_t stop[RL_MAX_STOP_IDS];
	uint8_t  logprobs;             /* 0: none; 1 + n: each generated token's log-probability and the
					* n (<= RL_MAX_TOP_LOGPROBS) most likely tokens', in the slab */
	uint8_t  prompt_logprobs;      /* 0: none; 1 + n: the same for every prompt token after the
					* first, as RL_EV_PROMPT events before the output; max_new may
					* then be 0 (scoring a text) */
	uint8_t  no_spec;              /* 0 or 1: no speculative decoding for this request */
	uint8_t  cons_kind;            /* enum rl_cons_kind: the output must match the constraint whose
					* text (cons_len bytes, UTF-8, 4 to an arena word, little end
					* first) follows the prompt ids in the arena */
	uint32_t cons_len;
	uint8_t  deterministic;        /* 0 or 1: the request's logits are the same bits whatever shares
					* its steps (issue 51); -ENOTSUP from a backend without the mode */
	uint8_t  _pad[128 - 105];
};
_Static_assert(sizeof(struct rl_req) == 128, "rl_req is one 128-byte slot");

/* One event record, 16 bytes. */
struct rl_evt {
	uint32_t rid;
	uint32_t token;
	uint16_t type;                 /* enum rl_ev_type */
	int16_t  code;                 /* finish reason, or -errno */
	uint32_t index;                /* token index within the output */
};
_Static_assert(sizeof(struct rl_evt) == 16, "rl_evt is 16 bytes");

/* One token's log-probabilities (slab slot), over the model's distribution (its logits at
 * temperature 1, before any top-k/top-p cut): the sampled token's, and the n_top most likely
 * tokens' in decreasing order (ties: lower id first). Written by the runtime, so a client
 * checks n_top <= RL_MAX_TOP_LOGPROBS before trusting it. */
struct rl_lp {
	float    logprob;
	uint32_t n_top;
	uint32_t top_id[RL_MAX_TOP_LOGPROBS];
	float    top_lp[RL_MAX_TOP_LOGPROBS];
};
_Static_assert(sizeof(struct rl_lp) == 168, "rl_lp is 168 bytes");

/* ---- info segment (read-only to clients) ------------------------------------------- */

/* The latency histograms' upper bounds in microseconds (the last bucket is +Inf): the queue
 * time the runtime counts (rl_info_stats.queue_time) and the ones ringlm-http keeps. */
#define RL_LAT_BOUNDS_US { 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, \
			   1000000, 2500000, 5000000, 10000000 }
#define RL_LAT_N 14                  /* bounds; a histogram has RL_LAT_N + 1 buckets */

struct rl_info_stats {                 /* written by the runtime (relaxed), read by anyone */
	_Atomic uint64_t clients, active_requests, queued_requests, running, prefilling, paused;
	_Atomic uint64_t steps, tokens_out, tokens_prefill, requests_done, requests_error;
	_Atomic uint64_t kv_blocks_total, kv_blocks_free, preemptions;
	_Atomic uint64_t prefix_hit_tokens, prefix_query_tokens;
	_Atomic uint64_t budget, last_step_tokens, last_step_ns;
	_Atomic uint64_t rejected_invalid, rejected_limit, rejected_busy, hostile_clients;
	_Atomic uint64_t attaches, detaches, refused, sleeps;
	/* automatic budget (runtime/sched/rl_budget.h): step_ns ≈ c0 + c_samp·sampled rows +
	 * c_pf·prefill tokens + c_datt·decode ctx/1024 + c_patt·prefill attention pairs/1024 */
	_Atomic uint64_t itl_target_ns;
	_Atomic uint64_t coef_c0_ps, coef_samp_ps, coef_pf_ps, coef_datt_ps, coef_patt_ps;  /* picoseconds */
	_Atomic uint64_t budget_margin_ppm;  /* the relative error quantile the pick keeps below T */
	_Atomic uint64_t budget_calib_ns;    /* the start-up calibration's wall time */
	/* refusals before a slot is taken (all are also counted in refused) */
	_Atomic uint64_t refused_uid;        /* peer uid/gid not allowed, refused at accept */
	_Atomic uint64_t refused_full;       /* no free client slot (or the owner's reserved one) */
	_Atomic uint64_t dropped_preattach;  /* silent connections: timed out or evicted by a newer one */
	_Atomic uint64_t observers;          /* observer attaches served (ringlm stats, top) */
	_Atomic uint64_t spec_k;             /* --spec ngram: the longest draft; 0 = off */
	_Atomic uint64_t spec_drafted, spec_accepted;  /* draft tokens verified, and accepted */
	_Atomic uint64_t spec_rounds;        /* verifications: decodes that carried drafts */
	_Atomic uint64_t latency_profile;    /* 1 under --latency */
	_Atomic uint64_t rt_page_faults;     /* the runtime thread's page faults so far (minor + major) */
	_Atomic uint64_t idle_window_ns;     /* awake this long without work before sleeping (rl_idle.h) */
	_Atomic uint64_t idle_awake_ns;      /* time spent awake without work past the pure spin (50 us):
					      * what the idle window costs in cpu */
	/* time from a request's arrival to its first admission, by RL_LAT_BOUNDS_US (not cumulative) */
	_Atomic uint64_t queue_time[RL_LAT_N + 1];
	_Atomic uint64_t queue_time_sum_ns, queue_time_count;
	/* KV events (ringlmd --kv-events, runtime/loop/rl_kvev.h) */
	_Atomic uint64_t kv_events_on;       /* 1 when publishing */
	_Atomic uint64_t kv_events_sent;     /* events sent (a coalesced BlockStored counts its blocks) */
	_Atomic uint64_t kv_events_msgs;     /* messages sent */
	_Atomic uint64_t kv_events_dropped;  /* events the full queue could not take (then a resync) */
	_Atomic uint64_t kv_events_resyncs;  /* AllBlocksCleared + the whole cache announced again */
	_Atomic uint64_t cache_resets;       /* RL_OP_RESET_CACHE that emptied the cache */
	/* overload (the automatic budget's running cap; ringlmd --max-queue-ms) */
	_Atomic uint64_t max_running;        /* sequences that may run at once now */
	_Atomic uint64_t overloaded;         /* requests ended unadmitted after max_queue_ns (-ETIME) */
	_Atomic uint64_t max_queue_ns;       /* --max-queue-ms; 0 = no bound */
	_Atomic uint64_t coef_prompt_ps;       /* the step model's c_prompt (rl_budget.h), picoseconds */
	/* the constraint compiler's helper thread (runtime/loop/rl_rt_cons.h) */
	_Atomic uint64_t cons_compiles;      /* compiles it finished (failed ones too) */
	_Atomic uint64_t cons_compile_ns;    /* their wall time, prewarm included */
	_Atomic uint64_t cons_prewarmed;     /* masks it computed ahead for the runtime thread */
	_Atomic uint64_t cons_waiting;       /* requests waiting for a compile now */
};

struct rl_info {
	uint32_t magic, version;
	uint64_t size;
	_Alignas(RL_CACHELINE) _Atomic uint32_t rt_sleeping;  /* runtime is (about to be) asleep */
	_Atomic uint32_t state;        /* RL_STATE_* */
	_Atomic uint64_t heartbeat_ns; /* CLOCK_MONOTONIC, refreshed by a timer */
	_Alignas(RL_CACHELINE) char backend[16];
	char     model[64];
	char     chat_template[16];    /* family name (tokenizer/rl_chat.h), "" when none */
	char     chat_system[192];     /* the template's default system turn, "" when none */
	uint32_t vocab_size, max_ctx, bos_id, eos_id;
	uint32_t max_prompt, max_new, max_inflight, max_clients;
	uint32_t block_size, wake_mode;
	uint32_t vocab_off, vocab_size_bytes;
	int32_t  pid;
	uint32_t deterministic;        /* 0: the backend has no deterministic mode (a request asking is
					* refused); 1: a request may ask (rl_req.deterministic); 2: every
					* request has it (ringlmd --deterministic) */
	_Alignas(RL_CACHELINE) struct rl_info_stats st;
};
enum { RL_STATE_RUNNING = 1, RL_STATE_DRAINING = 2, RL_STATE_STOPPED = 3 };

#endif
