/* http_req.h — an OpenAI request body (/v1/completions, /v1/chat/completions) parsed and
 * validated into what ringlm submits, apart from the server, as redis splits parse, validate
 * and execute: ringlm_http.c's handle_generate submits what http_req_parse gives, and
 * tests/test_http_req.c calls it on bodies directly. Every parameter is one ringlm reads, or
 * one it can only take at its default value; anything else is refused by name. */
#ifndef RL_HTTP_REQ_H
#define RL_HTTP_REQ_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "clients/ringlm.h"

#define HTTP_MAX_STOPS    4            /* stop strings per request (as OpenAI) */
#define HTTP_MAX_STOP_LEN 64
#define HTTP_MAX_N        16           /* choices a request may ask for ('n') */

/* What the runtime allows (from ringlm_info) */
struct http_limits {
	uint32_t max_new, vocab_size, max_prompt;
	int      has_chat;                 /* the model has a chat template ringlm formats */
	const char *chat_name;             /* its family's name, for messages */
};

/* A request, validated. The prompt is text (malloc'd), token ids (malloc'd) or, for chat,
 * messages whose strings point into the parsed body (json, kept until http_req_free). */
struct http_req {
	int      chat, stream, echo;
	int      deterministic;            /* ringlm_request.deterministic */
	int      lp_on, lp_top;            /* log-probabilities, and alternatives a token */
	int      n;                        /* choices */
	uint32_t max_tokens, top_k;
	float    temperature, top_p;
	int      has_seed;
	int64_t  seed;
	int      n_stops;
	char     stops[HTTP_MAX_STOPS][HTTP_MAX_STOP_LEN + 1];
	char    *text;
	uint32_t *ids;
	int      n_ids;
	struct ringlm_chat_msg *msgs;
	size_t   n_msgs;
	char    *schema;                   /* response_format json_schema: its schema, compact JSON
					    * (malloc'd), for ringlm_constraint_create; NULL: none */
	int      tools;                    /* chat with tools, or with calls or results in its history:
					    * the body goes to ringlm_tools_create (msgs unset) */
	json_t  *json;
};

/* Why a body was refused: the kind (for the error counters) and one line */
enum http_req_error { HTTP_REQ_OK = 0, HTTP_REQ_BAD_JSON, HTTP_REQ_BAD, HTTP_REQ_NO_TEMPLATE };

/* Parses and validates body[len] for the endpoint (chat 0: completions, 1: chat). 0 and *r
 * filled (free it with http_req_free), or an enum http_req_error with why set (and nothing to
 * free). */
int  http_req_parse(const char *body, size_t len, int chat, const struct http_limits *lim,
		    struct http_req *r, char *why, size_t whylen);
void http_req_free(struct http_req *r);

#endif
