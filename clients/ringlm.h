/* ringlm.h — the public C API of libringlm: attach to a ringlm runtime (a ringlmd daemon, or
 * one embedded in this process) and stream tokens through shared-memory rings.
 *
 * Threading: one struct ringlm is used by one thread at a time (the rings are SPSC), with one
 * exception: one thread may call submit/cancel while one other thread calls poll/wait (the
 * request ids they share are locked inside; the Python binding reads events on its own
 * thread this way). Everything else, tokenize included, follows the first rule.
 * Allocation: connect allocates; submit/poll/wait/cancel allocate nothing.
 * Errors: every call returns >= 0 on success or -errno. ringlm_last_error() then holds one line
 * naming the function, what was wrong and what to do (not for -EAGAIN, which is routine
 * back-pressure and stays allocation- and formatting-free); ringlm_strerror() names the code
 * alone, and some codes mean different things per function: each function lists its own.
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

enum ringlm_ev_type { RINGLM_EV_TOKEN = 1, RINGLM_EV_DONE = 2, RINGLM_EV_ERROR = 3,
		      RINGLM_EV_PROMPT = 4 /* only with prompt_logprobs: token = the prompt's id at
					    * position index (1 ..), its log-probabilities beside it */ };
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
	int16_t  code;           /* DONE: enum ringlm_finish; ERROR: -errno (ringlm_strerror), e.g.
				  * -EOVERFLOW: the request's constraint needs more automaton states than
				  * the runtime's cap (ringlmd --cons-max-states), at once or mid-answer */
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
	uint8_t  logprobs;       /* 1: each generated token's log-probability (ringlm_poll_ex); 0: none */
	uint8_t  top_logprobs;   /* with logprobs, also the n (<= RINGLM_MAX_TOP_LOGPROBS) most likely
				  * tokens' at each position */
	uint8_t  prompt_logprobs;/* 1: also every prompt token's after the first (and top_logprobs
				  * alternatives), as RINGLM_EV_PROMPT events before the output; max_new
				  * may then be 0, scoring a text without generating. The prompt's
				  * KV is computed anew (the prefix cache serves it no rows). */
	uint8_t  no_spec;        /* 1: no speculative decoding for this request (ringlmd --spec);
				  * its tokens are the same either way, only their timing differs */
	uint8_t  deterministic;  /* 1: this request's logits, hence its tokens and log-probabilities,
				  * are the same bits whatever other requests share its steps, however
				  * its prompt is chunked, with or without speculation, prefix-cache
				  * hits or preemption, at any thread count (the steps it is in take
				  * row-invariant kernels; its cached blocks are shared only with such
				  * requests). On a runtime started with --deterministic every request
				  * has it. A backend without the mode refuses it (-ENOTSUP) */
	const struct ringlm_constraint *constraint;   /* structured output (ringlm_constraint_create):
				  * every generated token keeps the output a prefix of something the
				  * constraint accepts, and the end-of-turn token comes only where
				  * it accepts the whole; NULL: none. Never speculated. Log-probabilities
				  * are then of the constrained distribution. The constraint's text
				  * travels with the request (the runtime keeps it compiled for the
				  * next ones with the same text). */
};

/* Structured output: a regular expression (Python re syntax without look-around and
 * back-references; the whole output must match), a JSON Schema (types, enum, const,
 * properties/required, additionalProperties (no key beyond 'properties' is ever produced;
 * a required key it does not name takes additionalProperties' value), min/maxProperties,
 * dependentRequired, propertyNames, items/prefixItems (and drafts 4-2019's items array with
 * additionalItems), min/maxItems, min/maxLength, pattern, format (date, time, date-time,
 * uuid, ipv4, email, hostname, uri), minimum/maximum/exclusive* on integers and numbers,
 * whole multipleOf, anyOf/oneOf/allOf, $ref to any place in the document, recursion
 * included; keywords no JSON Schema draft defines, and keywords of a type the schema does
 * not have, are passed over as validators do; the output is compact JSON with properties in
 * the schema's order; a schema too large for one automaton becomes a grammar of its parts)
 * or a grammar in llama.cpp's GBNF (matching starts at rule 'root'; token references and
 * left recursion are refused). Checked and compiled here: a keyword it cannot enforce, or a
 * bad expression, is refused now, by name, in ringlm_last_error().
 * 0, -EINVAL, -E2BIG (text over 64 KiB, or too large even as a grammar), -ENOMEM. */
#define RINGLM_CONSTRAINT_REGEX       1
#define RINGLM_CONSTRAINT_JSON_SCHEMA 2
#define RINGLM_CONSTRAINT_GBNF        3
struct ringlm_constraint;
RINGLM_API int  ringlm_constraint_create(int kind, const char *text, size_t len, struct ringlm_constraint **out);
RINGLM_API void ringlm_constraint_destroy(struct ringlm_constraint *k);

#define RINGLM_MAX_TOP_LOGPROBS 20

/* A TOKEN event's log-probabilities, from ringlm_poll_ex / ringlm_wait_ex: over the model's
 * distribution at that position (its logits at temperature 1, before top-k/top-p), the
 * sampled token's, and the n_top most likely tokens' in decreasing order (ties: lower id
 * first). They travel in a slab of the client segment, slot for slot with the event ring,
 * so the 16-byte event record stays as it is and nothing is written when they are off. */
struct ringlm_logprobs {
	float    logprob;        /* of the event's token */
	uint32_t n_top;          /* 0 for events without log-probabilities */
	uint32_t top_id[RINGLM_MAX_TOP_LOGPROBS];
	float    top_logprob[RINGLM_MAX_TOP_LOGPROBS];
};

struct ringlm_params {
	const char *socket;      /* daemon socket name or path (default "default") */
	/* Embedded mode: set model to run the runtime thread inside this process. */
	const char *model;       /* model path, or "synthetic:SHAPE", or NULL */
	const char *tokenizer;   /* optional tokenizer path (llama2.c .bin) */
	const char *backend;     /* "cpu" (default when model is set), "sim", "cuda" */
	const char *runtime_args;/* more ringlmd options for the embedded runtime, e.g. "--kv-blocks 512" */
	int      spin_us;        /* ringlm_wait spins this long, then polls between yields of the
				  * cpu 4 times as long (at most 200 us), before sleeping (default 50;
				  * 0: sleep at once). A pure spin keeps the cpu from every other task,
				  * the runtime thread included when the kernel wakes it there: spin
				  * longer only with the client pinned apart from the runtime */
	int      force_fallback; /* 1: wake through eventfds even where futex waits work */
	int      observe;        /* 1: info and stats only (ringlm_get_info, ringlm_stats_json):
				  * takes no client slot, so it works when --max-clients are all
				  * taken; submit/cancel/poll/wait return -EPERM */
};

struct ringlm_info {
	char     model[64];
	char     backend[16];
	uint32_t vocab_size, max_ctx, bos_id, eos_id;
	uint32_t max_prompt, max_new, max_inflight;
	int      futex_wake;     /* 1: futex doorbells, 0: eventfd fallback */
	char     chat_template[16]; /* the model's chat template family: "llama3", "chatml",
				  * "mistral", or "" (none, or one ringlm does not format) */
	int      deterministic;  /* 0: the runtime's backend has no deterministic mode; 1: a request
				  * may ask for it (ringlm_request.deterministic); 2: every request
				  * has it (ringlmd --deterministic) */
	uint32_t block_size;     /* tokens a KV cache block holds */
};

RINGLM_API struct ringlm_params  ringlm_default_params(void);
RINGLM_API struct ringlm_request ringlm_default_request(void);

/* Attaches to a ringlmd (p->socket) or starts an embedded runtime (p->model). 0 and *out,
 * or: -ENOENT no socket at that path (start ringlmd, or check the name); -ECONNREFUSED a
 * stale socket with nobody listening; -EACCES this uid is not admitted (ringlmd --allow-uid);
 * -EUSERS every client slot is taken (ringlmd --max-clients); -ESHUTDOWN the runtime is
 * stopping; -EPROTO client and runtime were built from different versions; -EINVAL a bad
 * embedded model or option (ringlm_last_error() has the loader's message). */
RINGLM_API int  ringlm_connect(const struct ringlm_params *p, struct ringlm **out);
/* Detaches (the runtime cancels whatever this client still had running) and frees c. For
 * an embedded runtime, also stops it and joins its thread. */
RINGLM_API void ringlm_close(struct ringlm *c);
/* The last error of this thread: one line naming the failing function, what was wrong and
 * what to do. Set by every call that returns an error other than -EAGAIN. */
RINGLM_API const char *ringlm_last_error(void);

/* Non-blocking. 0 and *id on success. The prompt (and stop) arrays are copied into shared
 * memory before this returns: the caller may free or reuse them at once.
 * -EAGAIN the request ring, the prompt arena or the in-flight table is full (poll events,
 * then retry); -EINVAL empty prompt, max_new 0 or too many stop ids; -E2BIG prompt or
 * max_new over the runtime's --max-prompt/--max-new (ringlm_get_info has both);
 * -ESHUTDOWN the runtime is draining (requests already accepted still finish);
 * -ECONNRESET the runtime is gone. The runtime checks the sampling parameters and token ids
 * and answers a bad request with an ERROR event (-EINVAL, -ERANGE) for that id. */
RINGLM_API int  ringlm_submit(struct ringlm *c, const struct ringlm_request *r, uint32_t *id);
/* Asks the runtime to stop request id. 0 when the cancel is sent, -EINVAL when id is not
 * live (it already ended: its DONE or ERROR event was polled, or it was never submitted),
 * -EAGAIN when the request ring is full (poll, then retry), -ECONNRESET when the runtime is
 * gone. Cancel is asynchronous: TOKEN events produced before the runtime sees it still
 * arrive, then exactly one DONE with RINGLM_FIN_CANCEL (or the request's own DONE, if it
 * finished first). The id is reusable only after that final event is polled. */
RINGLM_API int  ringlm_cancel(struct ringlm *c, uint32_t id);
/* Asks the runtime to empty its prefix cache (as vLLM's reset_prefix_cache; routers that
 * follow its KV events hear AllBlocksCleared). Takes a request id like ringlm_submit (*id,
 * events carry tag) and is answered on it: DONE when the cache is empty, ERROR -EBUSY while
 * requests hold cached blocks (retry when they have finished). 0, or -EAGAIN / -ESHUTDOWN /
 * -ECONNRESET / -EPERM as ringlm_submit. */
RINGLM_API int  ringlm_reset_prefix_cache(struct ringlm *c, uint64_t tag, uint32_t *id);
/* Never blocks: copies up to max events, returns the count (0 if none) or -errno
 * (-ECONNRESET once the runtime is gone and every event it sent has been read). */
RINGLM_API int  ringlm_poll(struct ringlm *c, struct ringlm_event *ev, int max);
/* Spins spin_us, then sleeps until an event arrives or timeout_ms passes (-1 = forever).
 * Returns the count, 0 on timeout, -ECONNRESET if the runtime died. */
RINGLM_API int  ringlm_wait(struct ringlm *c, struct ringlm_event *ev, int max, int timeout_ms);
/* As ringlm_poll and ringlm_wait, with lp[i] the log-probabilities of ev[i] (lp may be NULL):
 * set for the TOKEN events of requests submitted with logprobs, n_top 0 and logprob 0 for
 * every other event. A backend without them (sim, cuda) answers such a request with an
 * ERROR event, -ENOTSUP. */
RINGLM_API int  ringlm_poll_ex(struct ringlm *c, struct ringlm_event *ev, struct ringlm_logprobs *lp, int max);
RINGLM_API int  ringlm_wait_ex(struct ringlm *c, struct ringlm_event *ev, struct ringlm_logprobs *lp, int max,
			       int timeout_ms);
RINGLM_API int  ringlm_get_info(struct ringlm *c, struct ringlm_info *info);
/* The runtime's live stats as one JSON object into buf; returns its length, or -ENOSPC
 * when buf is too small (4096 bytes always suffice). */
RINGLM_API int  ringlm_stats_json(struct ringlm *c, char *buf, size_t len);
/* A short text for an -errno code; see each function for what the code means there. */
RINGLM_API const char *ringlm_strerror(int err);

/* Tokenizer from the runtime's vocabulary (in the info segment): no extra file needed.
 * Writes the ids of text (with the model's BOS first when add_bos and its vocabulary puts one
 * before a text: Llama 2 and 3 do, Qwen2 does not, as in llama.cpp) to ids and returns how
 * many. -ENOSPC when more than max_ids are needed (nothing useful is in ids then; the
 * count needed is in ringlm_last_error(); 3 x strlen(text) + 3 always suffices: an invalid UTF-8 byte reads as U+FFFD, as in llama.cpp); -ENOENT when
 * the runtime's model has no vocabulary (the sim backend, or a .bin model started without
 * --tokenizer): send ids with ringlm_submit directly. */
RINGLM_API int  ringlm_tokenize(struct ringlm *c, const char *text, int add_bos,
				uint32_t *ids, int max_ids);
/* The text of token id, given the id before it: pass prev = UINT32_MAX for the first
 * generated token when the prompt is not known here, or the prompt's last id (the BOS id
 * for an empty prompt) to drop the leading space SentencePiece puts after BOS. Byte tokens
 * (<0xNN>) come out as the raw byte. Copies at most len-1 bytes and a NUL into buf and
 * returns buf, or NULL when there is no vocabulary or len is 0. */
/* As ringlm_tokenize with flags: RINGLM_TOKENIZE_BOS (the model's BOS first, as add_bos) and
 * RINGLM_TOKENIZE_SPECIAL (control tokens written in the text, such as <|eot_id|>, become
 * their ids, as Hugging Face does by default; without it they are plain text). */
#define RINGLM_TOKENIZE_BOS     1u
#define RINGLM_TOKENIZE_SPECIAL 2u
RINGLM_API int  ringlm_tokenize_ex(struct ringlm *c, const char *text, unsigned flags,
				   uint32_t *ids, int max_ids);
RINGLM_API const char *ringlm_detokenize(struct ringlm *c, uint32_t prev, uint32_t id,
					 char *buf, size_t len);

/* A conversation in the runtime's model's chat template (ringlm_info.chat_template: Llama 3,
 * ChatML, Mistral, Phi-3 or Gemma turns), the assistant's turn opened at the end. Tokenize the
 * text with RINGLM_TOKENIZE_SPECIAL and without RINGLM_TOKENIZE_BOS (it starts with the
 * template's own BOS where the template writes one); the runtime ends the answer at the
 * model's end-of-turn token. Writes at most cap bytes (NUL included) and returns the length
 * the text needs; -ENOTSUP when the model has no template ringlm knows (format the prompt
 * yourself), -EINVAL for a role other than system/user/assistant or turns the template
 * cannot take (Mistral's and Gemma's alternate user/assistant). */
struct ringlm_chat_msg {
	const char *role;        /* "system", "user", "assistant" */
	const char *content;
};
RINGLM_API int ringlm_chat_format(struct ringlm *c, const struct ringlm_chat_msg *m, int n,
				  char *out, int cap);

/* Tool calling, as OpenAI's chat API has it, in the model's template family (ChatML as
 * Hermes/Qwen2.5 write it, Llama 3.1's JSON calls, Gemma's documented prompt; Mistral and
 * Phi-3: -ENOTSUP). request is a chat request's JSON object: "messages" (roles system, user,
 * assistant (with "tool_calls"), tool), "tools", "tool_choice" ("none", "auto" (the default
 * with tools), "required", or {"type": "function", "function": {"name": ...}}) and
 * "parallel_tool_calls" (default true); other keys are not read. It gives the prompt (the
 * tools and the history in the template; tokenize it as ringlm_chat_format's text) and the
 * constraint to submit it with (NULL: none), which holds the answer to the family's call
 * format, each call's arguments to its tool's "parameters" JSON Schema (as
 * RINGLM_CONSTRAINT_JSON_SCHEMA's; 'pattern' is refused); ringlm_tools_parse reads the
 * answer back. 0 and *out, or -EINVAL (ringlm_last_error() names the field), -ENOTSUP, -ENOMEM. */
struct ringlm_tools;
RINGLM_API int  ringlm_tools_create(struct ringlm *c, const char *request, size_t len, struct ringlm_tools **out);
RINGLM_API const char *ringlm_tools_prompt(const struct ringlm_tools *t);
RINGLM_API const struct ringlm_constraint *ringlm_tools_constraint(const struct ringlm_tools *t);
/* The answer's text as {"content": string or null, "tool_calls": [{"id", "type": "function",
 * "function": {"name", "arguments" (JSON text)}}, ...]} ("tool_calls" absent when there are
 * none; with calls the content is trimmed, null when empty). Writes at most cap bytes (NUL
 * included) and returns the length needed; -EINVAL, -ENOMEM. */
RINGLM_API int  ringlm_tools_parse(const struct ringlm_tools *t, const char *text, size_t len, char *out, size_t cap);
RINGLM_API void ringlm_tools_destroy(struct ringlm_tools *t);

/* Streaming text of one sequence, as its TOKEN events arrive: push each token id and get
 * back only whole UTF-8 characters. A token may end inside a character (byte-level BPE
 * splits emoji and CJK characters; SentencePiece spells them as <0xNN> byte tokens); its
 * bytes are held until the rest arrives, so no event's text is invalid UTF-8 that the next
 * would repair. Bytes that can never complete a character (a stray continuation byte) are
 * passed on as they are, never held. Caller memory, no allocation:
 *     struct ringlm_textstream ts;
 *     ringlm_textstream_init(&ts, last_prompt_id);
 *     on each TOKEN: n = ringlm_textstream_push(c, &ts, ev.token, buf, sizeof buf);
 *     on DONE:       n = ringlm_textstream_flush(&ts, buf, sizeof buf);                  */
struct ringlm_textstream {
	uint32_t prev;                 /* the last token pushed (the space rule of detokenize) */
	uint32_t n_held;               /* bytes of an incomplete character, at most 3 */
	char     held[4];
};
/* prev: the prompt's last id (UINT32_MAX for none), as ringlm_detokenize takes it. */
RINGLM_API void ringlm_textstream_init(struct ringlm_textstream *s, uint32_t prev);
/* Writes the text that token id completes into buf (NUL-terminated) and returns its length:
 * 0 when it all waits for the next token. -ENOENT when the runtime's model has no vocabulary;
 * -ENOSPC when buf cannot hold the piece (len 260 always can; nothing is consumed then). */
RINGLM_API int  ringlm_textstream_push(struct ringlm *c, struct ringlm_textstream *s, uint32_t id,
				       char *buf, size_t len);
/* At the end of the sequence: the held bytes, complete or not (and NUL). Their count. */
RINGLM_API int  ringlm_textstream_flush(struct ringlm_textstream *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
