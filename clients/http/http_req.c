/* http_req.c — an OpenAI request body parsed and validated (see http_req.h). Pure: no server,
 * no runtime; what needs them (the chat template, tokenizing, submitting) is the caller's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clients/http/http_req.h"

/* A number field in [lo, hi], when present and not null: -1 with why set otherwise */
static int num_field(json_t *o, const char *k, double lo, double hi, double *v, char *why, size_t wl)
{
	json_t *x = json_object_get(o, k);
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_number(x) || json_number_value(x) < lo || json_number_value(x) > hi) {
		snprintf(why, wl, "'%s' must be a number in [%g, %g]", k, lo, hi);
		return -1;
	}
	*v = json_number_value(x);
	return 0;
}

/* The parameters the endpoint takes: refused by name when not among them. OpenAI's, and
 * "deterministic" (ringlm's: the answer's bits independent of the requests beside it) */
static int known_keys(json_t *j, int chat, char *why, size_t wl)
{
	static const char *const known[2][24] = {
		{ "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stream", "stop", "seed",
		  "logprobs", "echo", "user", "stream_options", "presence_penalty", "frequency_penalty", "best_of",
		  "logit_bias", "suffix", "deterministic", NULL },
		{ "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n",
		  "stream", "stop", "seed", "logprobs", "top_logprobs", "user", "stream_options", "presence_penalty",
		  "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "parallel_tool_calls",
		  "deterministic", NULL },
	};
	const char *key;
	json_t *val;
	json_object_foreach(j, key, val) {
		int ok = 0;
		for (int i = 0; i < 24 && known[chat][i] && !ok; i++)
			ok = !strcmp(key, known[chat][i]);
		if (!ok) {
			snprintf(why, wl, "'%.64s' is not a parameter ringlm supports; leave it out", key);
			return -1;
		}
	}
	return 0;
}

/* The parameters ringlm takes only at their defaults (penalties 0, no logit_bias, suffix,
 * best_of 1), echo, and log-probabilities: completions' logprobs N (the sampled token's and N
 * alternatives'), chat's logprobs true and top_logprobs N */
static int defaults_and_logprobs(json_t *j, struct http_req *r, char *why, size_t wl)
{
	static const char *const pens[] = { "presence_penalty", "frequency_penalty" };
	double pen = 0, best_of = 1, lp_top = 0;
	for (int i = 0; i < 2; i++) {
		if (num_field(j, pens[i], -2, 2, &pen, why, wl))
			return -1;
		if (pen != 0) {
			snprintf(why, wl, "'%s' is not supported (only 0)", pens[i]);
			return -1;
		}
	}
	json_t *lb = json_object_get(j, "logit_bias"), *sfx = json_object_get(j, "suffix"), *echo = json_object_get(j, "echo");
	const char *bad = lb && !json_is_null(lb) && !(json_is_object(lb) && !json_object_size(lb)) ?
			  "'logit_bias' is not supported" : sfx && !json_is_null(sfx) ? "'suffix' is not supported" :
			  echo && !json_is_null(echo) && !json_is_boolean(echo) ? "'echo' must be true or false" : NULL;
	if (bad) {
		snprintf(why, wl, "%s", bad);
		return -1;
	}
	r->echo = json_is_true(echo);
	if (num_field(j, "best_of", 1, 1, &best_of, why, wl))
		return -1;
	json_t *lpj = json_object_get(j, "logprobs");
	if (lpj && !json_is_null(lpj)) {
		if (r->chat) {
			if (!json_is_boolean(lpj)) {
				snprintf(why, wl, "'logprobs' must be true or false");
				return -1;
			}
			r->lp_on = json_is_true(lpj);
		} else if (num_field(j, "logprobs", 0, RINGLM_MAX_TOP_LOGPROBS, &lp_top, why, wl)) {
			return -1;
		} else {
			r->lp_on = 1;
		}
	}
	if (r->chat && num_field(j, "top_logprobs", 0, RINGLM_MAX_TOP_LOGPROBS, &lp_top, why, wl))
		return -1;
	if (r->chat && lp_top > 0 && !r->lp_on) {
		snprintf(why, wl, "'top_logprobs' needs 'logprobs': true");
		return -1;
	}
	if (lp_top != floor(lp_top)) {
		snprintf(why, wl, "'%s' must be a whole number", r->chat ? "top_logprobs" : "logprobs");
		return -1;
	}
	r->lp_top = (int)lp_top;
	return 0;
}

/* Sampling, length, choices and streaming */
static int sampling(json_t *j, const struct http_limits *lim, struct http_req *r, char *why, size_t wl)
{
	double max_tokens = r->chat ? lim->max_new : 16, temperature = 1, top_p = 1, top_k = 0, seed = -1, n = 1;
	json_t *stream = json_object_get(j, "stream"), *det = json_object_get(j, "deterministic");
	if (stream && !json_is_boolean(stream) && !json_is_null(stream)) {
		snprintf(why, wl, "'stream' must be true or false");
		return -1;
	}
	if (det && !json_is_boolean(det) && !json_is_null(det)) {
		snprintf(why, wl, "'deterministic' must be true or false");
		return -1;
	}
	r->deterministic = json_is_true(det);
	if (num_field(j, "max_tokens", r->echo ? 0 : 1, lim->max_new, &max_tokens, why, wl) ||
	    num_field(j, "max_completion_tokens", 1, lim->max_new, &max_tokens, why, wl) ||
	    num_field(j, "temperature", 0, 2, &temperature, why, wl) ||
	    num_field(j, "top_p", 0, 1, &top_p, why, wl) ||
	    num_field(j, "top_k", 0, lim->vocab_size, &top_k, why, wl) ||
	    num_field(j, "seed", -9.2e18, 9.2e18, &seed, why, wl) ||
	    num_field(j, "n", 1, HTTP_MAX_N, &n, why, wl))
		return -1;
	if (top_p <= 0) {
		snprintf(why, wl, "'top_p' must be in (0, 1]");
		return -1;
	}
	if (n != floor(n)) {
		snprintf(why, wl, "'n' must be a whole number of choices");
		return -1;
	}
	r->stream = json_is_true(stream);
	r->max_tokens = (uint32_t)max_tokens;
	r->temperature = (float)temperature;
	r->top_p = (float)top_p;
	r->top_k = (uint32_t)top_k;
	r->has_seed = seed >= 0;
	r->seed = r->has_seed ? (int64_t)seed : 0;
	r->n = (int)n;
	return 0;
}

/* stop: a string or up to HTTP_MAX_STOPS strings */
static int stops(json_t *j, struct http_req *r, char *why, size_t wl)
{
	json_t *st = json_object_get(j, "stop");
	if (!st || json_is_null(st))
		return 0;
	size_t cnt = json_is_array(st) ? json_array_size(st) : 1;
	for (size_t i = 0; i < cnt; i++) {
		const char *v = json_string_value(json_is_array(st) ? json_array_get(st, i) : st);
		if (!v || !*v || strlen(v) > HTTP_MAX_STOP_LEN || r->n_stops == HTTP_MAX_STOPS) {
			snprintf(why, wl, "'stop' must be a string or up to %d non-empty strings of at most %d bytes",
				 HTTP_MAX_STOPS, HTTP_MAX_STOP_LEN);
			return -1;
		}
		snprintf(r->stops[r->n_stops++], sizeof r->stops[0], "%s", v);
	}
	return 0;
}

/* A chat that is the tools' business (clients/chat_tools.c: it validates and formats it):
 * tools or their parameters given, or a history with calls or results */
static int tools_chat(json_t *j)
{
	static const char *const keys[] = { "tools", "tool_choice", "parallel_tool_calls" };
	for (int i = 0; i < 3; i++) {
		json_t *x = json_object_get(j, keys[i]);
		if (x && !json_is_null(x))
			return 1;
	}
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(j, "messages"), i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		json_t *calls = json_object_get(m, "tool_calls");
		if ((role && !strcmp(role, "tool")) || (calls && !json_is_null(calls)))
			return 1;
	}
	return 0;
}

/* The prompt: chat messages (formatted later, through the model's template, or by the tools'
 * formatter), or text, or token ids below the vocabulary's size */
static int prompt(json_t *j, const struct http_limits *lim, struct http_req *r, char *why, size_t wl)
{
	if (r->chat) {
		json_t *msgs = json_object_get(j, "messages");
		size_t nm = json_array_size(msgs);
		if (!nm) {
			snprintf(why, wl, "'messages' must be a non-empty array");
			return -1;
		}
		if ((r->tools = tools_chat(j))) {
			if (r->schema) {
				snprintf(why, wl, "'response_format' together with 'tools' or a tool-calling history is not "
					 "supported; give one of them");
				return -1;
			}
			return 0;
		}
		if (!(r->msgs = calloc(nm, sizeof *r->msgs)))
			return -ENOMEM;
		r->n_msgs = nm;
		for (size_t i = 0; i < nm; i++) {
			json_t *x = json_array_get(msgs, i);
			r->msgs[i].role = json_string_value(json_object_get(x, "role"));
			r->msgs[i].content = json_string_value(json_object_get(x, "content"));
			if (!r->msgs[i].role || !r->msgs[i].content) {
				snprintf(why, wl, "messages[%zu] needs a string 'role' and a string 'content'", i);
				return -1;
			}
		}
		return 0;
	}
	json_t *p = json_object_get(j, "prompt");
	if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
		p = json_array_get(p, 0);
	if (json_is_string(p))
		return (r->text = strdup(json_string_value(p))) ? 0 : -ENOMEM;
	if (!json_is_array(p) || !json_array_size(p) || json_array_size(p) > lim->max_prompt) {
		snprintf(why, wl, "'prompt' must be a string or a non-empty array of at most %u token ids", lim->max_prompt);
		return -1;
	}
	r->n_ids = (int)json_array_size(p);
	if (!(r->ids = malloc((size_t)r->n_ids * sizeof *r->ids)))
		return -ENOMEM;
	for (int i = 0; i < r->n_ids; i++) {
		json_t *x = json_array_get(p, (size_t)i);
		if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= lim->vocab_size) {
			snprintf(why, wl, "prompt[%d] is not a token id below %u", i, lim->vocab_size);
			return -1;
		}
		r->ids[i] = (uint32_t)json_integer_value(x);
	}
	return 0;
}

/* response_format (chat): "text"; "json_schema" with json_schema.schema, which becomes
 * r->schema (compiled by the caller, whose engine names what it cannot enforce); "json_object"
 * (an object of any keys and values) as the schema {"type":"object"} */
static int response_format(json_t *j, struct http_req *r, char *why, size_t wl)
{
	json_t *rf = json_object_get(j, "response_format");
	if (!rf || json_is_null(rf))
		return 0;
	const char *type = json_string_value(json_object_get(rf, "type"));
	if (!json_is_object(rf) || !type) {
		snprintf(why, wl, "'response_format' must be an object with a 'type'");
		return -1;
	}
	if (!strcmp(type, "text"))
		return 0;
	if (!strcmp(type, "json_object"))
		return (r->schema = strdup("{\"type\":\"object\"}")) ? 0 : -ENOMEM;
	if (strcmp(type, "json_schema")) {
		snprintf(why, wl, "'response_format' type '%.32s' is not one of text, json_object, json_schema", type);
		return -1;
	}
	json_t *js = json_object_get(rf, "json_schema"), *schema = json_object_get(js, "schema");
	if (!json_is_object(js) || !json_is_object(schema)) {
		snprintf(why, wl, "'response_format' json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
		return -1;
	}
	if (!(r->schema = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER)))
		return -ENOMEM;
	return 0;
}

int http_req_parse(const char *body, size_t len, int chat, const struct http_limits *lim,
		   struct http_req *r, char *why, size_t wl)
{
	memset(r, 0, sizeof *r);
	r->chat = chat;
	json_error_t je;
	json_t *j = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		snprintf(why, wl, "the body is not a JSON object (line %d column %d: %s); send Content-Type: application/json",
			 j ? 1 : je.line, j ? 1 : je.column, j ? "not an object" : je.text);
		json_decref(j);
		return HTTP_REQ_BAD_JSON;
	}
	r->json = j;
	if (known_keys(j, chat, why, wl) || defaults_and_logprobs(j, r, why, wl) || sampling(j, lim, r, why, wl) ||
	    stops(j, r, why, wl) || response_format(j, r, why, wl)) {
		http_req_free(r);
		return HTTP_REQ_BAD;
	}
	if (chat && !lim->has_chat) {
		snprintf(why, wl, "this model has no chat template ringlm formats (it formats Llama 3, ChatML, Mistral, "
			 "Phi-3 and Gemma); format the conversation yourself and use /v1/completions");
		http_req_free(r);
		return HTTP_REQ_NO_TEMPLATE;
	}
	int rc = prompt(j, lim, r, why, wl);
	if (rc) {
		if (rc == -ENOMEM)
			snprintf(why, wl, "out of memory");
		http_req_free(r);
		return HTTP_REQ_BAD;
	}
	return HTTP_REQ_OK;
}

void http_req_free(struct http_req *r)
{
	free(r->text);
	free(r->ids);
	free(r->msgs);
	free(r->schema);
	json_decref(r->json);
	memset(r, 0, sizeof *r);
}
