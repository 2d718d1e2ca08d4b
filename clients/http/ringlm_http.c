/* ringlm_http.c — ringlm-http: an OpenAI-compatible HTTP front for a ringlmd.
 *
 * A separate process and an ordinary ringlm client (libringlm over the shared-memory rings),
 * so the runtime's hot path never parses HTTP. Endpoints:
 *   POST /v1/completions, POST /v1/chat/completions  (stream: true gives server-sent events)
 *   POST /v1/completions/render, /v1/chat/completions/render  (the same body: the prompt ids it
 *        would have prefilled, as vLLM answers them; nothing is submitted)
 *   GET  /v1/models, /health, /metrics (Prometheus text: ringlm's names, and vLLM's for routers
 *        such as llm-d's endpoint picker)
 * HTTP is libmicrohttpd (one epoll thread; a waiting response suspends its connection, so
 * thousands of idle connections cost no threads), JSON is jansson.
 *
 * Threads: MHD's thread parses requests, tokenizes and submits; the pump thread waits on the
 * event ring, turns tokens into text (stop strings held back until they cannot match) and
 * response bytes, and resumes the connection. g.mu guards the requests, the tokenizer and the
 * submit side of the client (submit/cancel happen under it, from either thread); only the
 * pump waits, without it: the sharing libringlm allows (one submitter, one waiter).
 * A client that disconnects has its request cancelled: at once while streaming (the next
 * write fails), at completion otherwise (a suspended connection is not watched; a stream held
 * for its first event, at that event).
 * A stream's status waits for its first event (a token, a prompt log-probability, or its end):
 * a request the runtime refuses before then is answered with its real status (an overload a
 * 503 with Retry-After, a bad request a 400) rather than an error inside a 200's stream; after
 * it, errors go in the stream. Overload (the runtime full at submit, or a request ended
 * unadmitted: -ETIME past ringlmd --max-queue-ms, -ENOSPC with its request pool full) is a 503
 * with Retry-After, so clients and routers back off or go elsewhere.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "clients/ringlm.h"
#include "clients/chat_tools.h"
#include "tokenizer/rl_chat.h"
#include "clients/http/http_req.h"

#define MAX_BODY   (1u << 20)          /* bytes of a request body */
#define TAGS       8192                /* open-addressing table of live requests, by tag */

/* Retry-After on an overload 503, in whole seconds (the header's unit; 1 is its smallest useful
 * value). The runtime sheds load by time already: a request it ends with -ETIME has waited its
 * --max-queue-ms (default 10 s) unadmitted, so the client has paid for the overload before it
 * hears of it, and the queue drains as running sequences finish (decode steps are 10-40 ms, an
 * answer a few seconds). A longer hint would leave the replica idle once it drains; clients
 * that honour it (the openai package does, up to 60 s) and routers that retry elsewhere spread
 * the retries themselves. */
#define RETRY_AFTER "1"

/* ---------------------------------------------------------------- metrics ---------- */

/* Histogram upper bounds: a token's latency is milliseconds, a whole request's seconds to
 * minutes (vLLM's e2e bounds, so dashboards built for it read ours alike) */
static const double tok_le[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 };
static const double e2e_le[] = { 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960,
				 1920, 7680 };
#define MAX_LE 24
#define N_LE(a) (sizeof a / sizeof *a)
struct hist { const double *le; size_t nb; uint64_t n[MAX_LE + 1]; double sum; uint64_t count; };

static void hist_add(struct hist *h, double v)
{
	size_t i = 0;
	while (i < h->nb && v > h->le[i])
		i++;
	h->n[i]++;
	h->sum += v;
	h->count++;
}

/* busy: the runtime was full at submit (rings, arena or in-flight table: -EAGAIN); overloaded:
 * it ended the request unadmitted (-ETIME after --max-queue-ms, -ENOSPC with its request pool
 * full); runtime: any other error it ended a request with */
enum { EK_BAD_JSON, EK_BAD_REQUEST, EK_TOO_LARGE, EK_NOT_FOUND, EK_BUSY, EK_RUNTIME, EK_DISCONNECT,
       EK_NO_TEMPLATE, EK_OVERLOADED, EK_COUNT };
static const char *const ek_name[EK_COUNT] = { "bad_json", "bad_request", "too_large", "not_found",
	"busy", "runtime", "client_disconnect", "no_chat_template", "overloaded" };

/* How a choice ended, as vLLM's request_success_total labels it: tool calls are a stop, a
 * cancel (the client went away, or a runtime error ended the request) an abort */
enum { FIN_STOP, FIN_LENGTH, FIN_ABORT, FIN_COUNT };
static const char *const fin_name[FIN_COUNT] = { "stop", "length", "abort" };

/* ringlm-http's own counters and histograms: one struct, so a scrape copies it under g.mu
 * and formats the copy without the lock */
struct metrics {
	struct hist ttft, itl, e2e;
	uint64_t req_count[2][6];      /* [completions/chat][status class 2xx..5xx idx] */
	uint64_t errors[EK_COUNT];
	uint64_t tokens_streamed;
	uint64_t finished[FIN_COUNT];  /* choices ended, by how */
	uint64_t overloaded;           /* requests answered 503 + Retry-After (the runtime overloaded) */
};

/* ringlm_stats_json's room: the runtime's stats grow (histograms) */
#define STATS_MAX  16384

/* ---------------------------------------------------------------- requests --------- */

/* One choice of an HTTP request: one ringlm request. A request for n choices has n of them in
 * one array; the first (head) holds what is the HTTP request's: the connection, the output,
 * the references (the connection's and one a choice the runtime still owes an end to), and
 * done / status once every choice has ended. Choice 0 goes to the runtime at once, the others
 * when its first token arrives: by then its prompt's full KV blocks are in the runtime's
 * prefix cache, which serves the copies' prefill (submitted together, each would compute its
 * own). */
struct req {
	struct req *head;
	int      index, n_choices;     /* this choice's index; head: how many (that will end) */
	int      n_alloc;              /* head: choices allocated (freed with it) */
	int      n_ended, ended, failed;   /* head: choices ended, an error answered; this choice ended */
	uint64_t tag;
	uint32_t rid;
	int      refs;                 /* head: the connection's and the runtime's */
	struct ringlm_request q;       /* head with copies still to submit: choice 0's request, and */
	uint32_t *ids;                 /* its prompt (q.prompt), until they are submitted */
	struct ringlm_constraint *cons; /* head: response_format's schema, compiled, for every choice */
	struct ringlm_tools *tools;    /* head: the request's tools (prompt, calls' constraint), or NULL */
	struct rl_tools_scan scan;     /* with tools: this choice's answer read into text and calls */
	int      n_submitted;          /* head: choices given to the runtime */
	int      chat, stream;
	struct MHD_Connection *conn;
	int      suspended, closed, done, stopped, status, sent_role;
	int      started;              /* head: an event of it arrived (token, prompt, end) */
	int      sse;                  /* head: the 200 event-stream response is queued; errors go in it */
	int      overload;             /* head: failed for overload: its 503 says Retry-After */
	const char *finish;
	struct ringlm_textstream ts;
	char    *text;                 /* generated text (stop strings cut) */
	size_t   text_len, text_cap, emitted;
	char     stops[HTTP_MAX_STOPS][HTTP_MAX_STOP_LEN + 1];
	int      n_stops;
	size_t   max_stop;
	char    *out;                  /* response bytes not yet handed to MHD */
	size_t   out_len, out_cap, out_off;
	uint32_t n_prompt, n_gen;
	uint32_t *lp_prev_p;           /* echo with logprobs: each prompt item's token before it */
	/* log-probabilities (completions' logprobs, chat's logprobs/top_logprobs): one item per
	 * generated token, as chat answers them ({token, logprob, bytes, top_logprobs}), with its
	 * text offset; completions' form is made from them (lp_json) */
	int      lp_on, lp_top;
	json_t  *lp_items;
	size_t  *lp_off;               /* [items] where each token's text starts */
	size_t   lp_sent;              /* items already streamed */
	uint32_t lp_prev;              /* the token before the next (for its text) */
	size_t   echo_len;             /* echo: the prompt's text at the start of text, its bytes */
	uint32_t lp_p0;                /* echo with logprobs: the prompt position of item 0 */
	uint64_t t_start, t_last;      /* ns */
	char     id[48];
	long long created;
};

/* what MHD keeps per connection */
struct conn_state {
	char  *body;
	size_t len;
	int    too_big;
	struct req *r;                 /* once submitted */
	int    waiting;                /* suspended until r->done, a stream until r's first event */
};

static struct {
	struct ringlm *c;
	struct ringlm_info info;
	enum rl_chat_family chat;
	pthread_mutex_t mu;
	struct req *live[TAGS];
	uint64_t next_tag;
	_Atomic int stop;
	struct metrics m;
	char model_label[3 * sizeof ((struct ringlm_info *)0)->model];  /* g.info.model, label-escaped */
	int verbose;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER, .m = { .ttft = { tok_le, N_LE(tok_le) }, .itl = { tok_le, N_LE(tok_le) },
					       .e2e = { e2e_le, N_LE(e2e_le) } } };

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need)
		c *= 2;
	char *n = realloc(*p, c);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

static void out_put(struct req *r, const char *s, size_t n)
{
	r = r->head;
	if (grow(&r->out, &r->out_cap, r->out_len + n))
		return;
	memcpy(r->out + r->out_len, s, n);
	r->out_len += n;
}

static void live_add(struct req *r)
{
	size_t i = r->tag % TAGS;
	while (g.live[i])
		i = (i + 1) % TAGS;
	g.live[i] = r;
}

static struct req *live_find(uint64_t tag, size_t *at)
{
	for (size_t i = tag % TAGS, k = 0; k < TAGS; i = (i + 1) % TAGS, k++) {
		if (!g.live[i])
			return NULL;
		if (g.live[i]->tag == tag) {
			*at = i;
			return g.live[i];
		}
	}
	return NULL;
}

/* removes slot at, re-placing the run after it (open addressing without tombstones) */
static void live_del(size_t at)
{
	g.live[at] = NULL;
	for (size_t i = (at + 1) % TAGS; g.live[i]; i = (i + 1) % TAGS) {
		struct req *r = g.live[i];
		g.live[i] = NULL;
		live_add(r);
	}
}

static void req_unref(struct req *r)
{
	r = r->head;
	if (--r->refs)
		return;
	for (int i = 0; i < r->n_alloc; i++) {
		free(r[i].text);
		if (r[i].lp_items)
			json_decref(r[i].lp_items);
		free(r[i].lp_off);
		free(r[i].lp_prev_p);
	}
	free(r->out);
	free(r->ids);
	ringlm_constraint_destroy(r->cons);
	ringlm_tools_destroy(r->tools);
	free(r);
}

/* ---------------------------------------------------------------- JSON out --------- */

/* JSON strings must be valid UTF-8, and a model may emit bytes that are not (a byte token
 * alone, a character cut by max_tokens): each invalid byte becomes U+FFFD, as Python's
 * errors="replace" and the peers do. Returns a malloc'd copy and its length in *out_len. */
static char *utf8_clean(const char *s, size_t n, size_t *out_len)
{
	char *o = malloc(3 * n + 1);
	size_t k = 0;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		int ok = len && i + len <= n;
		for (size_t j = 1; ok && j < len; j++)
			ok = ((unsigned char)s[i + j] & 0xc0) == 0x80;
		if (ok && len > 1) {           /* no overlong forms, surrogates or > U+10FFFF */
			uint32_t cp = len == 2 ? (c & 0x1fu) << 6 | (s[i + 1] & 0x3f) :
				      len == 3 ? (c & 0x0fu) << 12 | (s[i + 1] & 0x3fu) << 6 | (s[i + 2] & 0x3f) :
				      (c & 0x07u) << 18 | (s[i + 1] & 0x3fu) << 12 | (s[i + 2] & 0x3fu) << 6 | (s[i + 3] & 0x3f);
			ok = cp >= (len == 2 ? 0x80u : len == 3 ? 0x800u : 0x10000u) && cp <= 0x10ffff &&
			     (cp < 0xd800 || cp > 0xdfff);
		}
		if (ok) {
			memcpy(o + k, s + i, len);
			k += len;
			i += len;
		} else {
			memcpy(o + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
		}
	}
	o[k] = 0;
	*out_len = k;
	return o;
}

static json_t *json_text(const char *s, size_t n)
{
	size_t l;
	char *c = utf8_clean(s ? s : "", s ? n : 0, &l);
	json_t *j = c ? json_stringn(c, l) : NULL;
	free(c);
	return j ? j : json_string("");
}

static void out_json(struct req *r, json_t *j, int sse)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return;
	if (sse)
		out_put(r, "data: ", 6);
	out_put(r, s, strlen(s));
	if (sse)
		out_put(r, "\n\n", 2);
	free(s);
}

/* A token's text and bytes as OpenAI gives them: {token, logprob, bytes} */
static json_t *lp_entry(uint32_t prev, uint32_t id, float lp)
{
	char buf[520];
	const char *s = ringlm_detokenize(g.c, prev, id, buf, sizeof buf);
	const size_t n = s ? strlen(s) : 0;
	json_t *bytes = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(bytes, json_integer((unsigned char)s[i]));
	return json_pack("{s:o, s:f, s:o}", "token", json_text(s, n), "logprob", (double)lp, "bytes", bytes);
}

/* The log-probabilities of items [from, to) in the endpoint's form: chat's {content: [...]},
 * or completions' {tokens, token_logprobs, top_logprobs, text_offset} */
static json_t *lp_json(const struct req *r, size_t from, size_t to)
{
	if (r->chat) {
		json_t *a = json_array();
		for (size_t i = from; i < to; i++)
			json_array_append(a, json_array_get(r->lp_items, i));
		return json_pack("{s:o}", "content", a);
	}
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
	for (size_t i = from; i < to; i++) {
		json_t *it = json_array_get(r->lp_items, i), *top = json_object(), *x;
		size_t k;
		json_array_append(toks, json_object_get(it, "token"));
		json_array_append(lps, json_object_get(it, "logprob"));
		json_array_foreach(json_object_get(it, "top_logprobs"), k, x)
			json_object_set(top, json_string_value(json_object_get(x, "token")), json_object_get(x, "logprob"));
		if (json_is_null(json_object_get(it, "logprob"))) {   /* the prompt's first: nothing before it */
			json_decref(top);
			top = json_null();
		}
		json_array_append_new(tops, top);
		json_array_append_new(offs, json_integer((json_int_t)r->lp_off[i]));
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
			 "text_offset", offs);
}

/* The items not streamed yet (all of them at the end of a non-streamed answer), or JSON null
 * when the request asked for none */
static json_t *lp_take(struct req *r, size_t upto)
{
	if (!r->lp_on)
		return json_null();
	size_t n = json_array_size(r->lp_items);
	upto = upto < n ? upto : n;
	json_t *j = lp_json(r, r->lp_sent < upto ? r->lp_sent : upto, upto);
	r->lp_sent = upto;
	return j;
}

/* the request's usage: the prompt once, the tokens of every choice */
static json_t *usage_json(const struct req *h)
{
	json_int_t gen = 0;
	for (int i = 0; i < h->n_choices; i++)
		gen += h[i].n_gen;
	return json_pack("{s:i, s:i, s:i}", "prompt_tokens", (json_int_t)h->n_prompt, "completion_tokens",
			 gen, "total_tokens", (json_int_t)h->n_prompt + gen);
}

/* one streamed chunk of text (finish NULL while streaming); chat: or of delta (taken) */
static void sse_chunk_delta(struct req *r, const char *text, size_t n, json_t *delta, const char *finish)
{
	json_t *choice;
	if (r->chat) {
		if (!delta)
			delta = json_object();
		if (text)
			json_object_set_new(delta, "content", json_text(text, n));
		if (!r->sent_role) {    /* the first chunk says whose turn it is */
			json_object_set_new(delta, "role", json_string("assistant"));
			r->sent_role = 1;
		}
		choice = json_pack("{s:i, s:o, s:o, s:o}", "index", r->index, "delta", delta, "logprobs",
				   lp_take(r, SIZE_MAX), "finish_reason", finish ? json_string(finish) : json_null());
	} else {
		choice = json_pack("{s:o, s:i, s:o, s:o}", "text", json_text(text, n), "index", r->index,
				   "logprobs", lp_take(r, SIZE_MAX), "finish_reason", finish ? json_string(finish) : json_null());
	}
	const struct req *h = r->head;
	json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", h->id, "object",
			      r->chat ? "chat.completion.chunk" : "text_completion", "created", h->created,
			      "model", g.info.model, "choices", choice);
	if (finish && h->n_ended == h->n_choices)    /* the last choice's end carries the usage */
		json_object_set_new(j, "usage", usage_json(h));
	out_json(r, j, 1);
}

static void sse_chunk(struct req *r, const char *text, size_t n, const char *finish)
{
	sse_chunk_delta(r, text, n, NULL, finish);
}

/* A streamed answer with tools, as its scanner reads it: text as content, a call's start as
 * delta.tool_calls [{index, id, type, function: {name, arguments: ""}}], then its arguments'
 * pieces as [{index, function: {arguments}}], as OpenAI streams them */
static void tools_stream(void *ctx, enum rl_tools_ev ev, int call, const char *s, size_t n)
{
	struct req *r = ctx;
	if (ev == RL_TOOLS_TEXT) {
		sse_chunk(r, s, n, NULL);
		return;
	}
	json_t *tc = json_pack("{s:i}", "index", call), *fn = json_object();
	if (ev == RL_TOOLS_CALL) {
		char id[32];
		rl_tools_call_id(id);
		json_object_set_new(tc, "id", json_string(id));
		json_object_set_new(tc, "type", json_string("function"));
		json_object_set_new(fn, "name", json_text(s, n));
		json_object_set_new(fn, "arguments", json_string(""));
	} else {
		json_object_set_new(fn, "arguments", json_text(s, n));
	}
	json_object_set_new(tc, "function", fn);
	sse_chunk_delta(r, NULL, 0, json_pack("{s:[o]}", "tool_calls", tc), NULL);
}

/* A choice's message: its text, or with tools the text read into content and tool_calls;
 * *finish becomes "tool_calls" when the answer ended (not cut) with calls */
static json_t *message_json(const struct req *r, const char **finish)
{
	const struct ringlm_tools *t = r->head->tools;
	if (!t || !rl_tools_parses(t))
		return json_pack("{s:s, s:o}", "role", "assistant", "content", json_text(r->text, r->text_len));
	size_t cl;
	char *clean = utf8_clean(r->text ? r->text : "", r->text ? r->text_len : 0, &cl);
	int need = clean ? ringlm_tools_parse(t, clean, cl, NULL, 0) : -ENOMEM;
	char *buf = need >= 0 ? malloc((size_t)need + 1) : NULL;
	json_t *p = buf && ringlm_tools_parse(t, clean, cl, buf, (size_t)need + 1) >= 0 ? json_loads(buf, 0, NULL) : NULL;
	free(clean);
	free(buf);
	if (!p)
		return json_pack("{s:s, s:o}", "role", "assistant", "content", json_text(r->text, r->text_len));
	json_t *m = json_pack("{s:s, s:O}", "role", "assistant", "content", json_object_get(p, "content"));
	if (json_object_get(p, "tool_calls")) {
		json_object_set(m, "tool_calls", json_object_get(p, "tool_calls"));
		if (!strcmp(*finish, "stop"))
			*finish = "tool_calls";
	}
	json_decref(p);
	return m;
}

/* the whole answer, every choice, once the last has ended (h: the head) */
static void final_json(struct req *h)
{
	json_t *choices = json_array();
	for (int i = 0; i < h->n_choices; i++) {
		struct req *r = &h[i];
		/* the tokens whose text starts before the end (a stop string cuts the rest) */
		size_t keep = 0;
		while (r->lp_on && keep < json_array_size(r->lp_items) && (r->lp_off[keep] < r->text_len || !keep))
			keep++;
		const char *finish = r->finish;
		json_t *msg = r->chat ? message_json(r, &finish) : NULL;
		json_array_append_new(choices, r->chat ?
			json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg, "logprobs", lp_take(r, keep),
				  "finish_reason", finish) :
			json_pack("{s:o, s:i, s:o, s:s}", "text", json_text(r->text, r->text_len), "index", i,
				  "logprobs", lp_take(r, keep), "finish_reason", r->finish));
	}
	json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", h->id, "object",
			      h->chat ? "chat.completion" : "text_completion", "created", h->created,
			      "model", g.info.model, "choices", choices, "usage", usage_json(h));
	out_json(h, j, 0);
}

static json_t *error_json(const char *type, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *error_json(const char *type, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type", type, "param", "code");
}

/* ---------------------------------------------------------------- the pump --------- */

/* Emits generated text up to what can no longer be the start of a stop string. */
static void emit_text(struct req *r, int final)
{
	size_t safe = r->text_len;
	if (!final && !r->stopped && r->max_stop > 1)
		safe = r->text_len > r->max_stop - 1 ? r->text_len - (r->max_stop - 1) : 0;
	while (safe > r->emitted && safe < r->text_len && ((unsigned char)r->text[safe] & 0xc0) == 0x80)
		safe--;                        /* never inside a UTF-8 character */
	if (safe <= r->emitted)
		return;
	if (r->stream && r->head->tools)
		rl_tools_scan_feed(&r->scan, r->text + r->emitted, safe - r->emitted, tools_stream, r);
	else if (r->stream)
		sse_chunk(r, r->text + r->emitted, safe - r->emitted, NULL);
	r->emitted = safe;
}

/* Cuts the text at the first stop string; 1 when one was found. */
static int check_stops(struct req *r, size_t from)
{
	size_t best = SIZE_MAX;
	for (int i = 0; i < r->n_stops; i++) {
		size_t sl = strlen(r->stops[i]);
		for (size_t p = from; p + sl <= r->text_len; p++)
			if (!memcmp(r->text + p, r->stops[i], sl)) {
				if (p < best)
					best = p;
				break;
			}
	}
	if (best == SIZE_MAX)
		return 0;
	r->text_len = best;
	return 1;
}

static void wake(struct req *r)
{
	r = r->head;
	if (r->suspended && !r->closed) {
		r->suspended = 0;
		MHD_resume_connection(r->conn);
	}
}

static void fail_choices(struct req *h, int status, int kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Whether a runtime error code says it is overloaded (retry later) rather than that the
 * request is wrong: -EAGAIN (rings, arena or in-flight table full at submit), -ETIME (waited
 * ringlmd --max-queue-ms unadmitted), -ENOSPC (the runtime's request pool full) */
static int is_overload(int code)
{
	return code == -EAGAIN || code == -ETIME || code == -ENOSPC;
}

#define OVERLOADED "the server is overloaded; retry later"

/* The copies of choice 0 (see struct req), submitted once; a runtime that cannot take them
 * all now fails the request (the pump does not wait) */
static void submit_rest(struct req *h)
{
	int rc = 0;
	if (h->closed || h->failed)    /* nobody wants them any more */
		rc = -ECANCELED;
	while (h->n_submitted < h->n_choices && !rc) {
		struct req *x = &h[h->n_submitted];
		struct ringlm_request q = h->q;
		q.seed += (uint64_t)x->index;   /* choice c: its own draws */
		q.tag = x->tag;
		if (!(rc = ringlm_submit(g.c, &q, &x->rid))) {
			live_add(x);
			h->refs++;
			h->n_submitted++;
		}
	}
	free(h->ids);
	h->ids = NULL;
	if (rc == -ECANCELED) {
		h->n_choices = h->n_submitted;
		h->done = h->n_ended == h->n_choices;
	} else if (rc) {
		h->n_choices = h->n_submitted; /* the ones never submitted end here */
		if (is_overload(rc))
			fail_choices(h, 503, EK_BUSY, OVERLOADED " (the runtime is full: request ring, prompt arena or "
				     "in-flight table), or ask for fewer choices");
		else
			fail_choices(h, 400, EK_RUNTIME, "%s", ringlm_last_error());
	}
}

/* echo with logprobs: prompt position pos's numbers into its item (made at submit) */
static void on_prompt(struct req *r, uint32_t pos, const struct ringlm_logprobs *lp)
{
	if (!r->lp_on || pos < r->lp_p0 || pos - r->lp_p0 >= json_array_size(r->lp_items))
		return;
	json_t *it = json_array_get(r->lp_items, pos - r->lp_p0), *top = json_array();
	json_object_set_new(it, "logprob", json_real(lp->logprob));
	/* the alternatives' text after the token before this position */
	for (uint32_t i = 0; i < lp->n_top && i < (uint32_t)r->lp_top; i++)
		json_array_append_new(top, lp_entry(r->lp_prev_p[pos - r->lp_p0], lp->top_id[i], lp->top_logprob[i]));
	json_object_set_new(it, "top_logprobs", top);
}

static void on_token(struct req *r, uint32_t token, const struct ringlm_logprobs *lp)
{
	if (r->head->ids) {            /* choice 0's prompt is cached now: the copies' turn */
		submit_rest(r->head);
		if (r->head->failed)
			return;
	}
	uint64_t t = now_ns();
	if (!r->n_gen)
		hist_add(&g.m.ttft, (t - r->head->t_start) * 1e-9);
	else
		hist_add(&g.m.itl, (t - r->t_last) * 1e-9);
	r->t_last = t;
	if (r->stopped)
		return;                    /* tokens made before the cancel arrived */
	char piece[520];
	int n = ringlm_textstream_push(g.c, &r->ts, token, piece, sizeof piece);
	if (n < 0)
		n = 0;
	size_t from = r->text_len > r->max_stop ? r->text_len - r->max_stop : 0;
	from = from > r->echo_len ? from : r->echo_len;      /* stop strings look at the output only */
	if (grow(&r->text, &r->text_cap, r->text_len + (size_t)n + 1))
		return;
	if (r->lp_on && lp) {               /* the token's entry, its alternatives, where its text starts */
		size_t k = json_array_size(r->lp_items);
		size_t *o = realloc(r->lp_off, (k + 1) * sizeof *o);
		if (o) {
			r->lp_off = o;
			o[k] = r->text_len;
			json_t *it = lp_entry(r->lp_prev, token, lp->logprob), *top = json_array();
			for (uint32_t i = 0; i < lp->n_top && i < (uint32_t)r->lp_top; i++)
				json_array_append_new(top, lp_entry(r->lp_prev, lp->top_id[i], lp->top_logprob[i]));
			json_object_set_new(it, "top_logprobs", top);
			json_array_append_new(r->lp_items, it);
		}
	}
	r->lp_prev = token;
	memcpy(r->text + r->text_len, piece, (size_t)n);
	r->text_len += (size_t)n;
	r->n_gen++;
	g.m.tokens_streamed++;
	if (r->n_stops && check_stops(r, from)) {
		r->stopped = 1;
		r->finish = "stop";
		ringlm_cancel(g.c, r->rid);    /* under g.mu: the submit side is serialized */
	}
	emit_text(r, 0);
	if (r->stream)
		wake(r);
}

/* An error ends the request: its message is the answer, with its status, or once a stream's 200
 * is out an error chunk in it (after what was streamed); the other choices are cancelled, the
 * copies not submitted yet never are. kind: EK_*, EK_BUSY and EK_OVERLOADED an overload. */
static void fail_choices(struct req *h, int status, int kind, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	g.m.errors[kind]++;
	h->failed = 1;
	h->status = status;
	h->overload = kind == EK_BUSY || kind == EK_OVERLOADED;
	if (h->ids) {                  /* choice 0 failed before its copies went: they never will */
		free(h->ids);
		h->ids = NULL;
		h->n_choices = h->n_submitted;
	}
	const int sse = h->stream && h->sse;
	json_t *err = error_json(status == 400 ? "invalid_request_error" : "server_error", "%s", msg);
	if (!sse)                      /* the answer is the error alone */
		h->out_len = h->out_off = 0;
	out_json(h, err, sse);
	if (sse)
		out_put(h, "data: [DONE]\n\n", 14);
	for (int i = 0; i < h->n_choices; i++)      /* the others are not wanted any more */
		if (!h[i].ended && !h[i].stopped && i < h->n_submitted) {
			h[i].stopped = 1;
			ringlm_cancel(g.c, h[i].rid);
		}
	h->done = h->n_ended == h->n_choices;
	wake(h);
}

static void on_end(struct req *r, const struct ringlm_event *e)
{
	struct req *h = r->head;
	r->ended = 1;
	h->n_ended++;
	h->done = h->n_ended == h->n_choices;
	if (h->failed)                 /* another choice's error was the answer */
		return;
	if (e->type == RINGLM_EV_ERROR) {
		if (is_overload(e->code))
			fail_choices(h, 503, EK_OVERLOADED, OVERLOADED " (%s)", ringlm_strerror(e->code));
		else
			fail_choices(h, e->code == -EINVAL || e->code == -ERANGE || e->code == -E2BIG ||
					     e->code == -ENOTSUP || e->code == -EOVERFLOW ? 400 : 500, EK_RUNTIME,
				     "the runtime rejected the request: %s", ringlm_strerror(e->code));
		return;
	}
	if (h->ids) {                  /* choice 0 ended before a token: the copies go now */
		submit_rest(h);
		if (h->failed)
			return;
		h->done = h->n_ended == h->n_choices;
	}
	if (!r->stopped) {
		char rest[8];
		int n = ringlm_textstream_flush(&r->ts, rest, sizeof rest);
		if (n > 0 && !grow(&r->text, &r->text_cap, r->text_len + (size_t)n + 1)) {
			size_t from = r->text_len > r->max_stop ? r->text_len - r->max_stop : 0;
			from = from > r->echo_len ? from : r->echo_len;
			memcpy(r->text + r->text_len, rest, (size_t)n);
			r->text_len += (size_t)n;
			if (r->n_stops && check_stops(r, from))
				r->stopped = 1;
		}
		r->finish = r->stopped || e->code == RINGLM_FIN_STOP || e->code == RINGLM_FIN_EOS ? "stop" : "length";
	}
	if (r->text)
		r->text[r->text_len] = 0;
	emit_text(r, 1);
	if (r->stream) {
		if (h->tools) {
			rl_tools_scan_end(&r->scan, tools_stream, r);
			if (r->scan.n_done && !strcmp(r->finish, "stop"))
				r->finish = "tool_calls";
		}
		sse_chunk(r, NULL, 0, r->finish);
		if (h->done)
			out_put(r, "data: [DONE]\n\n", 14);
	} else if (h->done) {
		final_json(h);
	}
	if (h->done)
		h->status = 200;
	wake(r);
}

/* A choice's end into the metrics: how it ended and, ended by itself, its latency */
static void count_end(const struct req *r)
{
	int fin = !r->finish ? FIN_ABORT : !strcmp(r->finish, "length") ? FIN_LENGTH : FIN_STOP;
	g.m.finished[fin]++;
	if (fin != FIN_ABORT)
		hist_add(&g.m.e2e, (now_ns() - r->head->t_start) * 1e-9);
}

static void *pump(void *arg)
{
	struct ringlm_event ev[64];
	static struct ringlm_logprobs lp[64];
	while (!atomic_load(&g.stop)) {
		int n = ringlm_wait_ex(g.c, ev, lp, 64, 100);
		if (n < 0) {
			fprintf(stderr, "ringlm-http: the runtime is gone (%s); exiting\n", ringlm_strerror(n));
			exit(1);
		}
		pthread_mutex_lock(&g.mu);
		for (int i = 0; i < n; i++) {
			size_t at;
			struct req *r = live_find(ev[i].tag, &at);
			if (!r)
				continue;
			if (!r->head->started) {   /* a held stream's status is known now */
				r->head->started = 1;
				if (r->head->stream)
					wake(r);
			}
			if (ev[i].type == RINGLM_EV_TOKEN) {
				on_token(r, ev[i].token, &lp[i]);
				continue;
			}
			if (ev[i].type == RINGLM_EV_PROMPT) {
				on_prompt(r, ev[i].index, &lp[i]);
				continue;
			}
			live_del(at);
			if (!r->head->closed) {
				on_end(r, &ev[i]);
			} else {
				r->ended = 1;
				r->head->done = ++r->head->n_ended == r->head->n_choices;
			}
			count_end(r);
			req_unref(r);                  /* the runtime's reference */
		}
		pthread_mutex_unlock(&g.mu);
	}
	return NULL;
}

/* ---------------------------------------------------------------- requests in ------ */

/* A JSON body (s: malloc'd and taken, or NULL for none) as the answer; retry: an overload
 * 503, which says when to come back (RETRY_AFTER) */
static enum MHD_Result queue_json(struct MHD_Connection *conn, unsigned status, char *s, size_t len, int retry)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(s ? len : 0, s ? s : (char *)"",
								    s ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (retry)
		MHD_add_response_header(resp, "Retry-After", RETRY_AFTER);
	enum MHD_Result rc = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result send_json_ex(struct MHD_Connection *conn, unsigned status, json_t *j, int retry)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return queue_json(conn, status, s, s ? strlen(s) : 0, retry);
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
	return send_json_ex(conn, status, j, 0);
}

static enum MHD_Result fail(struct MHD_Connection *conn, int chat, unsigned status, int kind, const char *type,
			    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result fail(struct MHD_Connection *conn, int chat, unsigned status, int kind, const char *type,
			    const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	const int retry = status == 503 && kind == EK_BUSY;    /* the runtime full: an overload */
	pthread_mutex_lock(&g.mu);
	g.m.errors[kind]++;
	g.m.overloaded += (uint64_t)retry;
	if (chat >= 0)
		g.m.req_count[chat][status / 100]++;
	pthread_mutex_unlock(&g.mu);
	return send_json_ex(conn, status, error_json(type, "%s", msg), retry);
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct req *r = cls;
	pthread_mutex_lock(&g.mu);
	ssize_t n;
	if (r->out_off < r->out_len) {
		size_t k = r->out_len - r->out_off < max ? r->out_len - r->out_off : max;
		memcpy(buf, r->out + r->out_off, k);
		r->out_off += k;
		if (r->out_off == r->out_len)
			r->out_off = r->out_len = 0;
		n = (ssize_t)k;
	} else if (r->done) {
		n = MHD_CONTENT_READER_END_OF_STREAM;
	} else {                           /* nothing yet: sleep until the pump has some */
		r->suspended = 1;
		MHD_suspend_connection(r->conn);
		n = 0;
	}
	pthread_mutex_unlock(&g.mu);
	return n;
}

static void reader_free(void *cls)
{
	(void)cls;                         /* the request is freed by its references */
}

/* echo: the prompt's text (its tokens' pieces, as the output's are made, BOS left out) opens
 * the choice's text, and with logprobs an item per prompt token (the first's logprob null, the
 * others' filled in by their PROMPT events) */
static int echo_setup(struct req *x, const uint32_t *ids, int n_ids)
{
	int p0 = n_ids > 1 && ids[0] == g.info.bos_id;
	uint32_t prev = p0 ? ids[0] : UINT32_MAX;
	x->lp_p0 = (uint32_t)p0;
	if (x->lp_on && !(x->lp_prev_p = malloc((size_t)n_ids * sizeof *x->lp_prev_p)))
		return -1;
	for (int p = p0; p < n_ids; p++) {
		char piece[520];
		const char *s = ringlm_detokenize(g.c, prev, ids[p], piece, sizeof piece);
		size_t n = s ? strlen(s) : 0;
		if (x->lp_on) {
			size_t k = json_array_size(x->lp_items);
			size_t *o = realloc(x->lp_off, (k + 1) * sizeof *o);
			if (!o)
				return -1;
			x->lp_off = o;
			o[k] = x->text_len;
			x->lp_prev_p[k] = prev;
			json_t *it = lp_entry(prev, ids[p], 0);
			json_object_set_new(it, "logprob", json_null());
			json_object_set_new(it, "top_logprobs", json_array());
			json_array_append_new(x->lp_items, it);
		}
		if (grow(&x->text, &x->text_cap, x->text_len + n + 1))
			return -1;
		memcpy(x->text + x->text_len, s ? s : "", n);
		x->text_len += n;
		prev = ids[p];
	}
	x->echo_len = x->text_len;
	return 0;
}

/* Chat: the messages through the model's template (ringlm_chat_format) into q->text, and the
 * end of the assistant's turn as one more stop string; -1 with why set when they do not fit. */
static int chat_text(struct http_req *q, char *why, size_t wl)
{
	long len = q->n_msgs > INT32_MAX ? -EINVAL : ringlm_chat_format(g.c, q->msgs, (int)q->n_msgs, NULL, 0);
	if (len < 0 || !(q->text = malloc((size_t)len + 1))) {
		snprintf(why, wl, len < 0 ? "the messages do not fit the %s template (roles system, user, assistant; "
			 "Mistral's and Gemma's must alternate user/assistant and end with user)" : "out of memory",
			 rl_chat_name(g.chat));
		return -1;
	}
	ringlm_chat_format(g.c, q->msgs, (int)q->n_msgs, q->text, (int)len + 1);
	if (q->n_stops < HTTP_MAX_STOPS)
		snprintf(q->stops[q->n_stops++], sizeof q->stops[0], "%s", rl_chat_end(g.chat));
	return 0;
}

/* Chat with tools (or a history of calls and results): the body through ringlm_tools_create
 * (clients/chat_tools.c: it validates the tools, formats the conversation with them and
 * builds the calls' constraint) into q->text and *tools; -1 with why set when refused. */
static int tools_text(struct http_req *q, const struct conn_state *cs, struct ringlm_tools **tools, char *why, size_t wl)
{
	if (ringlm_tools_create(g.c, cs->body, cs->len, tools)) {
		const char *e = ringlm_last_error(), *colon = strstr(e, ": ");   /* past "ringlm_tools_create: " */
		snprintf(why, wl, "%s", colon ? colon + 2 : e);
		return -1;
	}
	if (!(q->text = strdup(ringlm_tools_prompt(*tools)))) {
		snprintf(why, wl, "out of memory");
		return -1;
	}
	if (q->n_stops < HTTP_MAX_STOPS)
		snprintf(q->stops[q->n_stops++], sizeof q->stops[0], "%s", rl_chat_end(g.chat));
	return 0;
}

/* A submit failed: the choices already submitted are cancelled (freed when their ends
 * arrive) and the connection gets the error. Called with g.mu held; releases it. */
static enum MHD_Result submit_failed(struct MHD_Connection *conn, struct req *r, int chat, int submitted, int rc)
{
	const int busy = is_overload(rc);
	char msg[384];
	if (rc == -EAGAIN)
		snprintf(msg, sizeof msg, OVERLOADED " (the runtime is full: request ring, prompt arena or in-flight table)");
	else
		snprintf(msg, sizeof msg, busy ? OVERLOADED " (%s)" : "%s", busy ? ringlm_strerror(rc) : ringlm_last_error());
	const int status = busy ? 503 : rc == -E2BIG || rc == -EINVAL ? 400 : 503;
	r->closed = 1;
	r->failed = 1;
	r->n_choices = submitted;
	for (int c = 0; c < submitted; c++) {
		r[c].stopped = 1;
		ringlm_cancel(g.c, r[c].rid);
	}
	req_unref(r);                      /* the connection's: it answers here */
	pthread_mutex_unlock(&g.mu);
	return fail(conn, chat, (unsigned)status, busy ? EK_BUSY : EK_RUNTIME,
		    status == 400 ? "invalid_request_error" : "server_error", "%s", msg);
}

/* The request is in: the connection sleeps until the pump resumes it (handler, cs->waiting)
 * at the end of the request, or a stream's at its first event, when its status is known.
 * Called with g.mu held; releases it. */
static enum MHD_Result answer(struct MHD_Connection *conn, struct conn_state *cs, struct req *r, int chat, int stream)
{
	r->chat = chat;
	r->stream = stream;
	cs->r = r;
	cs->waiting = 1;
	r->suspended = 1;
	MHD_suspend_connection(conn);
	pthread_mutex_unlock(&g.mu);
	return MHD_YES;
}

/* A stream's 200: its events as the pump makes them (reader) */
static enum MHD_Result answer_stream(struct MHD_Connection *conn, struct req *r)
{
	struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, reader, r, reader_free);
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	enum MHD_Result res = MHD_queue_response(conn, 200, resp);
	MHD_destroy_response(resp);
	return res;
}

/* A request made ready to submit */
struct prep {
	struct http_req q;
	struct ringlm_tools *tools;        /* chat with tools: their prompt and calls' constraint */
	struct ringlm_constraint *cons;    /* response_format's schema, compiled */
	uint32_t *ids;                     /* the prompt the runtime prefills (malloc'd) */
	int n_ids;
};

static void prep_free(struct prep *p)
{
	http_req_free(&p->q);
	ringlm_tools_destroy(p->tools);
	ringlm_constraint_destroy(p->cons);
	free(p->ids);
	memset(p, 0, sizeof *p);
}

/* The body into what it submits: parse and validate (http_req_parse), format a chat (the
 * model's template, or the tools' formatter), compile response_format, tokenize the text (BOS
 * first for completions, control tokens read for chat). The generation endpoints submit these
 * ids and the render endpoints answer them: one path, so a render is what gets prefilled.
 * 0, or -1 with *kind (EK_*) and why set (each a 400) and nothing to free. */
static int prepare(const struct conn_state *cs, int chat, struct prep *p, int *kind, char *why, size_t wl)
{
	memset(p, 0, sizeof *p);
	const struct http_limits lim = { g.info.max_new, g.info.vocab_size, g.info.max_prompt, g.chat != RL_CHAT_NONE,
					 rl_chat_name(g.chat) };
	int perr = http_req_parse(cs->body, cs->len, chat, &lim, &p->q, why, wl);
	if (perr) {
		*kind = perr == HTTP_REQ_BAD_JSON ? EK_BAD_JSON : perr == HTTP_REQ_NO_TEMPLATE ? EK_NO_TEMPLATE :
			EK_BAD_REQUEST;
		return -1;
	}
	*kind = EK_BAD_REQUEST;
	struct http_req *q = &p->q;
	if (chat && (q->tools ? tools_text(q, cs, &p->tools, why, wl) : chat_text(q, why, wl)))
		goto bad;
	/* response_format: refused here, by name, or compiled */
	if (q->schema && ringlm_constraint_create(RINGLM_CONSTRAINT_JSON_SCHEMA, q->schema, strlen(q->schema), &p->cons)) {
		const char *e = ringlm_last_error(), *colon = strstr(e, ": ");   /* past "ringlm_constraint_create: " */
		snprintf(why, wl, "'response_format': %s", colon ? colon + 2 : e);
		goto bad;
	}
	if (!q->text) {                    /* completions' prompt given as ids */
		p->ids = q->ids;
		p->n_ids = q->n_ids;
		q->ids = NULL;
		return 0;
	}
	int cap = 3 * (int)strlen(q->text) + 8;   /* rl_tok.h: 3 x len + 3 always suffices */
	if (!(p->ids = malloc((size_t)cap * sizeof *p->ids))) {
		snprintf(why, wl, "out of memory");
		goto bad;
	}
	pthread_mutex_lock(&g.mu);         /* tokenize under g.mu: the pump detokenizes */
	p->n_ids = ringlm_tokenize_ex(g.c, q->text, chat ? RINGLM_TOKENIZE_SPECIAL : RINGLM_TOKENIZE_BOS, p->ids, cap);
	if (p->n_ids < 0)
		snprintf(why, wl, "%s", ringlm_last_error());
	pthread_mutex_unlock(&g.mu);
	free(q->text);
	q->text = NULL;
	if (p->n_ids > 0 && (uint32_t)p->n_ids <= g.info.max_prompt)
		return 0;
	if (p->n_ids >= 0)
		snprintf(why, wl, "the prompt is %d tokens; it must be 1 to %u", p->n_ids, g.info.max_prompt);
bad:
	prep_free(p);
	return -1;
}

/* POST /v1/completions/render, /v1/chat/completions/render (vLLM's): the prompt ids the
 * body would have the runtime prefill, as [{"token_ids": [...]}]. Nothing is submitted, and
 * the endpoints' request counters are the generation ones' alone. */
static enum MHD_Result handle_render(struct MHD_Connection *conn, const struct conn_state *cs, int chat)
{
	char why[256] = "";
	struct prep p;
	int kind;
	if (prepare(cs, chat, &p, &kind, why, sizeof why))
		return fail(conn, -1, 400, kind, "invalid_request_error", "%s", why);
	json_t *ids = json_array();
	for (int i = 0; i < p.n_ids; i++)
		json_array_append_new(ids, json_integer(p.ids[i]));
	prep_free(&p);
	return send_json(conn, 200, json_pack("[{s:o}]", "token_ids", ids));
}

/* Make the body ready (prepare), then submit choice 0 (the others follow its first token)
 * and answer: streamed, or when the pump resumes us. */
static enum MHD_Result handle_generate(struct MHD_Connection *conn, struct conn_state *cs, int chat)
{
	char why[256] = "";
	struct prep p;
	int kind;
	if (prepare(cs, chat, &p, &kind, why, sizeof why))
		return fail(conn, chat, 400, kind, "invalid_request_error", "%s", why);
	struct http_req q = p.q;           /* what prepare made, owned here from now on */
	struct ringlm_tools *tools = p.tools;
	struct ringlm_constraint *cons = p.cons;
	uint32_t *ids = p.ids;
	const int n_ids = p.n_ids;
	const int n_ch = q.n, is_stream = q.stream, lp_on = q.lp_on, do_echo = q.echo, n_stops = q.n_stops;
	const uint32_t max_tokens = q.max_tokens;
	struct req *r = calloc((size_t)n_ch, sizeof *r);
	if (!r) {
		free(ids);
		http_req_free(&q);
		ringlm_constraint_destroy(cons);
		ringlm_tools_destroy(tools);
		return fail(conn, chat, 503, EK_BUSY, "server_error", "out of memory");
	}
	r->cons = cons;
	r->tools = tools;
	const struct ringlm_constraint *rcons = cons ? cons : ringlm_tools_constraint(tools);
	pthread_mutex_lock(&g.mu);
	r->n_choices = r->n_alloc = n_ch;
	r->refs = 1;                       /* the connection's; one more a choice submitted */
	r->conn = conn;
	r->n_prompt = (uint32_t)n_ids;
	r->created = (long long)time(NULL);
	r->tag = g.next_tag + 1;
	snprintf(r->id, sizeof r->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->created,
		 (unsigned long long)r->tag);
	r->t_start = now_ns();
	const uint64_t seed0 = q.has_seed ? (uint64_t)q.seed : now_ns() ^ r->tag;
	int rc = 0, submitted = 0;
	const uint32_t last_id = ids[n_ids - 1];   /* ids moves to the head for the copies */
	for (int c = 0; c < n_ch; c++) {
		struct req *x = &r[c];
		x->head = r;
		x->index = c;
		x->tag = ++g.next_tag;
		x->chat = chat;
		x->stream = is_stream;
		x->lp_on = lp_on;
		x->lp_top = q.lp_top;
		x->lp_items = lp_on ? json_array() : NULL;
		x->lp_prev = last_id;
		x->n_stops = n_stops;
		for (int i = 0; i < n_stops; i++) {
			memcpy(x->stops[i], q.stops[i], sizeof q.stops[i]);
			if (strlen(q.stops[i]) > x->max_stop)
				x->max_stop = strlen(q.stops[i]);
		}
		ringlm_textstream_init(&x->ts, last_id);
		if (tools)
			rl_tools_scan_init(&x->scan, tools);
		if (do_echo && echo_setup(x, ids, n_ids)) {
			rc = -ENOMEM;
			break;
		}
		struct ringlm_request rq = ringlm_default_request();
		rq.prompt = ids;
		rq.n_prompt = (uint32_t)n_ids;
		rq.max_new = max_tokens;
		rq.temperature = q.temperature;
		rq.top_p = q.top_p;
		rq.top_k = q.top_k;
		rq.seed = seed0 + (uint64_t)c;  /* choice c: its own draws */
		rq.tag = x->tag;
		rq.logprobs = (uint8_t)lp_on;
		rq.top_logprobs = (uint8_t)x->lp_top;
		/* echo: the prompt's own log-probabilities (and with max_tokens 0, only those) */
		rq.prompt_logprobs = (uint8_t)(do_echo && (lp_on || !max_tokens));
		rq.constraint = rcons;
		rq.deterministic = (uint8_t)q.deterministic;
		if (c) {                       /* the copies: when choice 0 has its first token */
			if (c == 1) {
				r->q = rq;
				r->q.seed = seed0;
				r->ids = ids;
				r->q.prompt = ids;
				ids = NULL;
			}
			continue;
		}
		for (int tries = 0; (rc = ringlm_submit(g.c, &rq, &x->rid)) == -EAGAIN && tries < 200; tries++) {
			pthread_mutex_unlock(&g.mu);   /* let the pump drain events meanwhile */
			usleep(500);
			pthread_mutex_lock(&g.mu);
		}
		if (!rc) {
			live_add(x);
			r->refs++;
			submitted++;
		}
		r->n_submitted = submitted;
		if (rc)
			break;
	}
	free(ids);
	http_req_free(&q);
	if (rc)
		return submit_failed(conn, r, chat, submitted, rc);
	return answer(conn, cs, r, chat, is_stream);
}

static enum MHD_Result handle_models(struct MHD_Connection *conn)
{
	return send_json(conn, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data",
					      "id", g.info.model, "object", "model", "created", (json_int_t)0,
					      "owned_by", "ringlm"));
}

static enum MHD_Result handle_health(struct MHD_Connection *conn)
{
	char buf[STATS_MAX];
	int n = ringlm_stats_json(g.c, buf, sizeof buf);
	json_t *s = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
	long long age = s ? (long long)json_integer_value(json_object_get(s, "heartbeat_age_ms")) : -1;
	json_decref(s);
	int ok = age >= 0 && age < 2000;
	return send_json(conn, ok ? 200 : 503, json_pack("{s:s, s:s, s:I}", "status", ok ? "ok" : "runtime not responding",
							 "model", g.info.model, "heartbeat_age_ms", (json_int_t)age));
}

static void prom_head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram family; lab: its labels ("name=\"v\"", or "" for none) */
static void prom_hist(FILE *f, const char *name, const char *lab, const char *help, const struct hist *h)
{
	const char *sep = *lab ? "," : "";
	prom_head(f, name, "histogram", help);
	uint64_t cum = 0;
	for (size_t i = 0; i < h->nb; i++) {
		cum += h->n[i];
		fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, h->le[i], (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep, (unsigned long long)h->count);
	if (*lab)
		fprintf(f, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, lab, h->sum, name, lab,
			(unsigned long long)h->count);
	else
		fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

/* The runtime's queue-time histogram, when its stats have it: queue_time_le_s (bounds),
 * queue_time_counts (a count a bucket, one more for +Inf), queue_time_sum_s, queue_time_count.
 * Anything else (absent, or not that shape) gives nothing. */
static void prom_queue_time(FILE *f, json_t *s, const char *lab)
{
	json_t *le = json_object_get(s, "queue_time_le_s"), *cnt = json_object_get(s, "queue_time_counts");
	json_t *sum = json_object_get(s, "queue_time_sum_s"), *count = json_object_get(s, "queue_time_count");
	size_t nb = json_array_size(le), i;
	json_t *x;
	if (!json_is_array(le) || !json_is_array(cnt) || json_array_size(cnt) != nb + 1 || !json_is_number(sum) ||
	    !json_is_number(count))
		return;
	json_array_foreach(le, i, x)
		if (!json_is_number(x))
			return;
	json_array_foreach(cnt, i, x)
		if (!json_is_number(x))
			return;
	const char *name = "vllm:request_queue_time_seconds";
	prom_head(f, name, "histogram", "Time requests spent waiting for admission in the runtime");
	double cum = 0;
	for (i = 0; i < nb; i++) {
		cum += json_number_value(json_array_get(cnt, i));
		fprintf(f, "%s_bucket{%s,le=\"%g\"} %.0f\n", name, lab, json_number_value(json_array_get(le, i)), cum);
	}
	cum += json_number_value(json_array_get(cnt, nb));
	/* _count is the buckets' total, not queue_time_count: the runtime's counters are read one by
	 * one, and Prometheus wants +Inf and _count equal */
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %.0f\n%s_sum{%s} %.6f\n%s_count{%s} %.0f\n", name, lab, cum, name, lab,
		json_number_value(sum), name, lab, cum);
}

/* vLLM's metric names (what llm-d's endpoint picker and vLLM dashboards read), labelled with
 * model_name: ringlm-http's latencies and endings from m, the engine's load from its stats s
 * (NULL: the runtime's stats could not be read, and only ringlm-http's are given) */
static void prom_vllm(FILE *f, const struct metrics *m, json_t *s)
{
	char lab[sizeof g.model_label + 16];
	snprintf(lab, sizeof lab, "model_name=\"%s\"", g.model_label);
	prom_hist(f, "vllm:time_to_first_token_seconds", lab, "Time to first token, seen by ringlm-http", &m->ttft);
	prom_hist(f, "vllm:inter_token_latency_seconds", lab, "Time between consecutive tokens of a request", &m->itl);
	prom_hist(f, "vllm:e2e_request_latency_seconds", lab, "Time from request to its last token, seen by ringlm-http",
		  &m->e2e);
	prom_head(f, "vllm:request_success_total", "counter", "Finished requests (choices) by finish reason");
	for (int k = 0; k < FIN_COUNT; k++)
		fprintf(f, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", lab, fin_name[k],
			(unsigned long long)m->finished[k]);
	if (!s)
		return;
	static const struct { const char *key, *name, *type, *help; } v[] = {
		{ "queued_requests", "vllm:num_requests_waiting", "gauge", "Requests waiting for admission" },
		{ "running", "vllm:num_requests_running", "gauge", "Sequences in the running batch" },
		{ "tokens_prefill", "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed" },
		{ "tokens_out", "vllm:generation_tokens_total", "counter", "Number of generation tokens processed" },
		{ "preemptions", "vllm:num_preemptions_total", "counter", "Sequences preempted for KV space" },
		{ "prefix_query_tokens", "vllm:prefix_cache_queries_total", "counter",
		  "Prompt tokens looked up in the prefix cache" },
		{ "prefix_hit_tokens", "vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache" },
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		json_t *x = json_object_get(s, v[i].key);
		if (json_is_number(x)) {
			prom_head(f, v[i].name, v[i].type, v[i].help);
			fprintf(f, "%s{%s} %.0f\n", v[i].name, lab, json_number_value(x));
		}
	}
	json_t *tot = json_object_get(s, "kv_blocks_total"), *fr = json_object_get(s, "kv_blocks_free");
	if (json_is_number(tot) && json_is_number(fr)) {
		double t = json_number_value(tot), used = t - json_number_value(fr);
		prom_head(f, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage, 0 to 1 (1: every block in use)");
		fprintf(f, "vllm:kv_cache_usage_perc{%s} %.6f\n", lab, t > 0 && used > 0 ? used / t : 0.0);
		prom_head(f, "vllm:cache_config_info", "gauge", "The KV cache's configuration, in its labels");
		fprintf(f, "vllm:cache_config_info{%s,block_size=\"%u\",num_gpu_blocks=\"%.0f\"} 1\n", lab,
			g.info.block_size, t);
	}
	prom_queue_time(f, s, lab);
}

/* A scrape (llm-d's endpoint picker scrapes every 50 ms): g.mu only to copy ringlm-http's
 * metrics; the runtime's stats are atomics in the shared info segment, read without it */
static enum MHD_Result handle_metrics(struct MHD_Connection *conn)
{
	char buf[STATS_MAX], *txt = NULL;
	size_t len = 0;
	pthread_mutex_lock(&g.mu);
	const struct metrics m = g.m;
	pthread_mutex_unlock(&g.mu);
	int n = ringlm_stats_json(g.c, buf, sizeof buf);
	json_t *s = n > 0 ? json_loadb(buf, (size_t)n, 0, NULL) : NULL;
	FILE *f = open_memstream(&txt, &len);
	if (!f) {
		json_decref(s);
		return send_json(conn, 503, error_json("server_error", "out of memory"));
	}
	prom_hist(f, "ringlm_http_ttft_seconds", "", "Time from request to first token, seen by ringlm-http", &m.ttft);
	prom_hist(f, "ringlm_http_inter_token_seconds", "", "Time between consecutive tokens of a request", &m.itl);
	prom_head(f, "ringlm_http_requests_total", "counter", "Requests by endpoint and status class");
	for (int e = 0; e < 2; e++)
		for (int c = 2; c <= 5; c++)
			fprintf(f, "ringlm_http_requests_total{endpoint=\"%s\",status=\"%dxx\"} %llu\n",
				e ? "chat_completions" : "completions", c, (unsigned long long)m.req_count[e][c]);
	prom_head(f, "ringlm_http_errors_total", "counter", "Errors by kind");
	for (int k = 0; k < EK_COUNT; k++)
		fprintf(f, "ringlm_http_errors_total{kind=\"%s\"} %llu\n", ek_name[k], (unsigned long long)m.errors[k]);
	prom_head(f, "ringlm_http_overloaded_total", "counter", "Requests answered 503 with Retry-After: the runtime "
		  "was full, or ended them unadmitted (--max-queue-ms) or with its request pool full");
	fprintf(f, "ringlm_http_overloaded_total %llu\n", (unsigned long long)m.overloaded);
	prom_head(f, "ringlm_http_tokens_streamed_total", "counter", "Tokens received for HTTP requests");
	fprintf(f, "ringlm_http_tokens_streamed_total %llu\n", (unsigned long long)m.tokens_streamed);
	static const struct { const char *key, *name, *type, *help; } rt[] = {
		{ "queued_requests", "ringlm_queue_depth", "gauge", "Requests waiting for admission" },
		{ "running", "ringlm_running_sequences", "gauge", "Sequences in the running batch" },
		{ "active_requests", "ringlm_active_requests", "gauge", "Requests admitted and not finished" },
		{ "kv_blocks_total", "ringlm_kv_blocks_total", "gauge", "KV cache blocks in the pool" },
		{ "tokens_prefill", "ringlm_tokens_in_total", "counter", "Prompt tokens prefilled" },
		{ "tokens_out", "ringlm_tokens_out_total", "counter", "Tokens generated" },
		{ "requests_done", "ringlm_requests_done_total", "counter", "Requests finished" },
		{ "requests_error", "ringlm_requests_error_total", "counter", "Requests ended by an error" },
		{ "rejected_invalid", "ringlm_rejected_invalid_total", "counter", "Requests rejected as invalid" },
		{ "rejected_busy", "ringlm_rejected_busy_total", "counter", "Requests rejected as busy" },
		{ "preemptions", "ringlm_preemptions_total", "counter", "Sequences preempted for KV space" },
		{ "steps", "ringlm_steps_total", "counter", "Model steps run" },
		{ "spec_drafted", "ringlm_spec_drafted_total", "counter", "Draft tokens verified (speculative decoding)" },
		{ "spec_accepted", "ringlm_spec_accepted_total", "counter", "Draft tokens accepted (speculative decoding)" },
		{ "clients", "ringlm_clients", "gauge", "Attached clients" },
	};
	for (size_t i = 0; s && i < sizeof rt / sizeof *rt; i++) {
		json_t *v = json_object_get(s, rt[i].key);
		if (json_is_number(v)) {
			prom_head(f, rt[i].name, rt[i].type, rt[i].help);
			fprintf(f, "%s %.0f\n", rt[i].name, json_number_value(v));
		}
	}
	if (s) {
		double tot = json_number_value(json_object_get(s, "kv_blocks_total"));
		double fr = json_number_value(json_object_get(s, "kv_blocks_free"));
		double hit = json_number_value(json_object_get(s, "prefix_hit_tokens"));
		double qry = json_number_value(json_object_get(s, "prefix_query_tokens"));
		prom_head(f, "ringlm_kv_blocks_used", "gauge", "KV cache blocks in use");
		fprintf(f, "ringlm_kv_blocks_used %.0f\n", tot - fr);
		prom_head(f, "ringlm_prefix_hit_ratio", "gauge", "Prompt tokens served from the prefix cache, of those looked up");
		fprintf(f, "ringlm_prefix_hit_ratio %.6f\n", qry > 0 ? hit / qry : 0.0);
	}
	prom_vllm(f, &m, s);
	json_decref(s);
	fclose(f);
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, txt, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
	enum MHD_Result rc = MHD_queue_response(conn, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct conn_state *cs = *con_cls;
	if (!cs) {
		if (!(cs = calloc(1, sizeof *cs)))
			return MHD_NO;
		*con_cls = cs;
		return MHD_YES;
	}
	if (*upload_size) {                /* body bytes: kept up to MAX_BODY, the rest dropped */
		if (!cs->too_big && cs->len + *upload_size <= MAX_BODY) {
			char *nb = realloc(cs->body, cs->len + *upload_size + 1);
			if (nb) {
				cs->body = nb;
				memcpy(cs->body + cs->len, upload, *upload_size);
				cs->len += *upload_size;
			}
		} else {
			cs->too_big = 1;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (cs->waiting) {                 /* resumed: the answer is ready, or a stream has begun */
		pthread_mutex_lock(&g.mu);
		struct req *r = cs->r;
		/* a whole answer (and a failed request: its cancelled choices' ends) waits for done; a
		 * stream that has not failed for its first event */
		if (r->stream && !r->failed ? !r->started && !r->done : !r->done) {   /* woken early: wait on */
			r->suspended = 1;
			MHD_suspend_connection(conn);
			pthread_mutex_unlock(&g.mu);
			return MHD_YES;
		}
		cs->waiting = 0;
		if (r->stream && !r->failed) { /* begun: a 200, and its events as they come */
			r->sse = 1;
			g.m.req_count[r->chat][2]++;
			pthread_mutex_unlock(&g.mu);
			return answer_stream(conn, r);
		}
		size_t len = r->out_len;
		char *body = malloc(len ? len : 1);
		if (body)
			memcpy(body, r->out, len);
		r->out_len = r->out_off = 0;
		int status = r->status ? r->status : 200;
		const int retry = status == 503 && r->overload;
		g.m.req_count[r->chat][status / 100]++;
		g.m.overloaded += (uint64_t)retry;
		pthread_mutex_unlock(&g.mu);
		return queue_json(conn, (unsigned)status, body, len, retry);
	}
	int post = !strcmp(method, "POST"), get = !strcmp(method, "GET");
	int render = !strcmp(url, "/v1/completions/render") || !strcmp(url, "/v1/chat/completions/render");
	int chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/v1/chat/completions/render");
	if (chat || render || !strcmp(url, "/v1/completions")) {
		const int ep = render ? -1 : chat;     /* the request counters are generation's */
		if (!post)
			return fail(conn, ep, 405, EK_BAD_REQUEST, "invalid_request_error", "%s takes POST", url);
		if (cs->too_big)
			return fail(conn, ep, 413, EK_TOO_LARGE, "invalid_request_error",
				    "the body is over %u bytes; send a shorter prompt", MAX_BODY);
		return render ? handle_render(conn, cs, chat) : handle_generate(conn, cs, chat);
	}
	if (get && !strcmp(url, "/v1/models"))
		return handle_models(conn);
	if (get && !strcmp(url, "/health"))
		return handle_health(conn);
	if (get && !strcmp(url, "/metrics"))
		return handle_metrics(conn);
	return fail(conn, -1, 404, EK_NOT_FOUND, "invalid_request_error",
		    "no route %s %s (POST /v1/completions, /v1/chat/completions, /v1/completions/render, "
		    "/v1/chat/completions/render; GET /v1/models, /health, /metrics)", method, url);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode why)
{
	struct conn_state *cs = *con_cls;
	if (!cs)
		return;
	if (cs->r) {
		pthread_mutex_lock(&g.mu);
		struct req *r = cs->r;
		r->closed = 1;
		if (!r->done) {            /* the client went away first: stop generating for it */
			g.m.errors[EK_DISCONNECT]++;
			for (int i = 0; i < r->n_submitted; i++)
				if (!r[i].ended && !r[i].stopped) {
					r[i].stopped = 1;
					ringlm_cancel(g.c, r[i].rid);
				}
		}
		req_unref(r);              /* the connection's reference */
		pthread_mutex_unlock(&g.mu);
	}
	free(cs->body);
	free(cs);
	*con_cls = NULL;
}

/* A Prometheus label value: backslash, double quote and newline escaped */
static void label_escape(const char *s, char *out, size_t cap)
{
	size_t k = 0;
	for (; *s && k + 3 < cap; s++) {
		if (*s == '\\' || *s == '"' || *s == '\n')
			out[k++] = '\\';
		out[k++] = *s == '\n' ? 'n' : *s;
	}
	out[k] = 0;
}

static void on_signal(int s)
{
	(void)s;
	atomic_store(&g.stop, 1);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ringlm-http [--socket NAME] [--host ADDR] [--port N] [--max-connections N]\n"
		   "                   [--timeout S] [--verbose]\n"
		   "An OpenAI-compatible HTTP front for a running ringlmd (a client of it, like any other).\n"
		   "  --socket NAME      the ringlmd to serve (default \"default\")\n"
		   "  --host ADDR        address to listen on (default 127.0.0.1: loopback only)\n"
		   "  --port N           TCP port (default 8080)\n"
		   "  --max-connections  open connections at most (default 4096)\n"
		   "  --timeout S        close a connection idle this long (default 15)\n");
}

int main(int argc, char **argv)
{
	const char *sock = "default", *host = "127.0.0.1";
	int port = 8080, max_conn = 4096, timeout = 15;
	static const struct option lo[] = {
		{ "socket", 1, 0, 's' }, { "host", 1, 0, 'H' }, { "port", 1, 0, 'p' },
		{ "max-connections", 1, 0, 'm' }, { "timeout", 1, 0, 't' }, { "verbose", 0, 0, 'v' },
		{ "help", 0, 0, 'h' }, { 0 } };
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		char *end = NULL;
		long v = optarg ? strtol(optarg, &end, 10) : 0;
		int bad_num = optarg && (!*optarg || *end);
		switch (o) {
		case 's': sock = optarg; break;
		case 'H': host = optarg; break;
		case 'p': if (bad_num || v < 1 || v > 65535) goto bad; port = (int)v; break;
		case 'm': if (bad_num || v < 1 || v > 100000) goto bad; max_conn = (int)v; break;
		case 't': if (bad_num || v < 1 || v > 3600) goto bad; timeout = (int)v; break;
		case 'v': g.verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		continue;
bad:
		fprintf(stderr, "ringlm-http: --%s wants a number in range (port 1-65535, max-connections 1-100000, "
			"timeout 1-3600 s), not '%s'\n", o == 'p' ? "port" : o == 'm' ? "max-connections" : "timeout", optarg);
		return 2;
	}
	/* thousands of connections need thousands of descriptors: raise the soft limit toward
	 * the hard one (and say so when that is short of --max-connections) */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < (rlim_t)max_conn + 64) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)max_conn + 64 ? rl.rlim_max : (rlim_t)max_conn + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < (rlim_t)max_conn + 64)
			fprintf(stderr, "ringlm-http: warning: %llu file descriptors allowed, fewer than --max-connections %d "
				"needs; raise `ulimit -Hn`\n", (unsigned long long)rl.rlim_cur, max_conn);
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "ringlm-http: --host %s is not an IPv4 address (e.g. 127.0.0.1)\n", host);
		return 2;
	}
	struct ringlm_params p = ringlm_default_params();
	p.socket = sock;
	int rc = ringlm_connect(&p, &g.c);
	if (rc) {
		fprintf(stderr, "ringlm-http: %s\n", ringlm_last_error());
		return 1;
	}
	ringlm_get_info(g.c, &g.info);
	label_escape(g.info.model, g.model_label, sizeof g.model_label);
	g.chat = rl_chat_from_name(g.info.chat_template);
	uint32_t probe[8];                 /* builds the tokenizer once, before two threads use it */
	ringlm_tokenize(g.c, "a", 1, probe, 8);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	pthread_t pt;
	pthread_create(&pt, NULL, pump, NULL);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
		(uint16_t)port, NULL, NULL, handler, NULL,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout,
		MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
		MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "ringlm-http: cannot listen on %s:%d (in use? try --port)\n", host, port);
		return 1;
	}
	fprintf(stderr, "ringlm-http: serving %s (chat template: %s) on http://%s:%d\n", g.info.model,
		g.chat ? rl_chat_name(g.chat) : "none", host, port);
	while (!atomic_load(&g.stop))
		pause();
	/* resume whatever is suspended (MHD must not stop with suspended connections): done, a
	 * whole answer is given as it is and a held stream gets its 200 and its end */
	pthread_mutex_lock(&g.mu);
	for (size_t i = 0; i < TAGS; i++)
		if (g.live[i]) {
			g.live[i]->done = 1;
			wake(g.live[i]);
		}
	pthread_mutex_unlock(&g.mu);
	MHD_stop_daemon(d);
	pthread_join(pt, NULL);
	ringlm_close(g.c);
	return 0;
}
