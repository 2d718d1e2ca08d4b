/* ringlm.h — the public C API of libringlm: attach to a ringlm runtime (a ringlmd daemon, or
 * one embedded in this process) and stream tokens through shared-memory rings.
 *
 * Threading: one struct ringlm is used by one thread at a time (the rings are SPSC).
 * Allocation: connect allocates; submit/poll/wait/cancel allocate nothing.
 * Errors: every call returns >= 0 on success or -errno; ringlm_strerror() names it.
 *
 *   struct ringlm_params p = ringlm_default_params();
 *   p.socket = "default";
 *   struct ringlm *c; int rc = ringlm_connect(&p, &c);
 *   struct ringlm_request r = ringlm_default_request();
 *   r.prompt = ids; r.n_prompt = n; r.max_new = 64;
 *   uint32_t id; rc = ringlm_submit(c, &r, &id);       // -EAGAIN: rings full, poll first
 *   struct ringlm_event ev[64];
 *   for (;;) { int n = ringlm_wait(c, ev, 64, -1); ... ev[i].type == RINGLM_EV_DONE ... }
 *   ringlm_close(c);
 */
#ifndef RINGLM_H
#define RINGLM_H
#include <errno.h>               /* the -errno codes the API returns (-EAGAIN, ...) */
#include <stdint.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

#define RINGLM_API __attribute__((visibility("default")))

struct ringlm;

#define RINGLM_MAX_STOP 8        /* stop ids per request */

enum ringlm_ev_type { RINGLM_EV_TOKEN = 1, RINGLM_EV_DONE = 2, RINGLM_EV_ERROR = 3 };
enum ringlm_finish {
	RINGLM_FIN_LENGTH = 1,   /* max_new tokens generated */
	RINGLM_FIN_STOP   = 2,   /* a stop id was sampled (token holds it; not emitted as TOKEN) */
	RINGLM_FIN_EOS    = 3,   /* the model's end-of-sequence id */
	RINGLM_FIN_CTX    = 4,   /* the context window is full */
	RINGLM_FIN_CANCEL = 5,   /* ringlm_cancel */
};

struct ringlm_event {
	uint64_t tag;            /* the request's tag, as submitted */
	uint32_t id;             /* the request id ringlm_submit returned */
	uint32_t token;          /* TOKEN: the id; DONE with FIN_STOP/EOS: the stop id */
	uint16_t type;           /* enum ringlm_ev_type */
	int16_t  code;           /* DONE: enum ringlm_finish; ERROR: -errno (ringlm_strerror) */
	uint32_t index;          /* TOKEN: 0-based index of the token within the output */
};

struct ringlm_request {
	const uint32_t *prompt;  /* prompt token ids (BOS included if wanted) */
	uint32_t n_prompt;
	uint32_t max_new;        /* tokens to generate at most (default 16) */
	float    temperature;    /* 0 = greedy (default) */
	uint32_t top_k;          /* 0 = off */
	float    top_p;          /* 1 = off */
	uint64_t seed;
	const uint32_t *stop;    /* up to RINGLM_MAX_STOP stop ids */
	uint32_t n_stop;
	int32_t  priority;       /* higher is admitted first (default 0) */
	uint64_t deadline_ns;    /* CLOCK_MONOTONIC; must be admitted before it, 0 = none */
	uint64_t tag;            /* echoed in every event */
};

struct ringlm_params {
	const char *socket;      /* daemon socket name or path (default "default") */
	/* Embedded mode: set model to run the runtime thread inside this process. */
	const char *model;       /* model path, or "synthetic:SHAPE", or NULL */
	const char *tokenizer;   /* optional tokenizer path (llama2.c .bin) */
	const char *backend;     /* "cpu" (default when model is set), "sim", "cuda" */
	const char *runtime_args;/* more ringlmd options for the embedded runtime, e.g. "--kv-blocks 512" */
	int      spin_us;        /* ringlm_wait spins this long before sleeping (default 50) */
	int      force_fallback; /* 1: wake through eventfds even where futex waits work */
};

struct ringlm_info {
	char     model[64];
	char     backend[16];
	uint32_t vocab_size, max_ctx, bos_id, eos_id;
	uint32_t max_prompt, max_new, max_inflight;
	int      futex_wake;     /* 1: futex doorbells, 0: eventfd fallback */
};

RINGLM_API struct ringlm_params  ringlm_default_params(void);
RINGLM_API struct ringlm_request ringlm_default_request(void);

RINGLM_API int  ringlm_connect(const struct ringlm_params *p, struct ringlm **out);
RINGLM_API void ringlm_close(struct ringlm *c);
/* Last connect error in this thread, a full sentence (e.g. why the runtime refused us). */
RINGLM_API const char *ringlm_last_error(void);

/* Non-blocking. 0 and *id on success; -EAGAIN when the request ring, the prompt arena or the
 * in-flight table is full (poll events, then retry); -EINVAL/-E2BIG for bad requests;
 * -ECONNRESET when the runtime is gone. */
RINGLM_API int  ringlm_submit(struct ringlm *c, const struct ringlm_request *r, uint32_t *id);
RINGLM_API int  ringlm_cancel(struct ringlm *c, uint32_t id);
/* Never blocks: copies up to max events, returns the count (0 if none) or -errno. */
RINGLM_API int  ringlm_poll(struct ringlm *c, struct ringlm_event *ev, int max);
/* Spins spin_us, then sleeps until an event arrives or timeout_ms passes (-1 = forever).
 * Returns the count, 0 on timeout, -ECONNRESET if the runtime died. */
RINGLM_API int  ringlm_wait(struct ringlm *c, struct ringlm_event *ev, int max, int timeout_ms);
RINGLM_API int  ringlm_get_info(struct ringlm *c, struct ringlm_info *info);
/* The runtime's live stats as one JSON object into buf; returns its length or -errno. */
RINGLM_API int  ringlm_stats_json(struct ringlm *c, char *buf, size_t len);
RINGLM_API const char *ringlm_strerror(int err);

/* Tokenizer from the runtime's vocabulary (in the info segment): no extra file needed. */
RINGLM_API int  ringlm_tokenize(struct ringlm *c, const char *text, int add_bos,
				uint32_t *ids, int max_ids);
/* The text of one token given the previous id (handles the leading space after BOS and
 * <0xNN> byte tokens). Returns a pointer valid until the next call, or NULL. */
RINGLM_API const char *ringlm_detokenize(struct ringlm *c, uint32_t prev, uint32_t id,
					 char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
