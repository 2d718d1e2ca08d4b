/* chat_tools.h — OpenAI tool calling over the chat template families (clients/chat_tools.c),
 * the part of ringlm_tools_* (ringlm.h) that has no runtime: a request's tools, tool_choice and
 * messages become the prompt, the constraint that holds the answer to the family's call format
 * (each call's arguments to its tool's parameters schema), and a scanner that reads the answer
 * back into text and calls as it streams. Used by libringlm's public calls and by ringlm-http,
 * which streams the scanner's pieces as OpenAI's delta.tool_calls. Not installed. */
#ifndef RL_CHAT_TOOLS_H
#define RL_CHAT_TOOLS_H
#include <jansson.h>
#include <stddef.h>
#include "clients/ringlm.h"
#include "tokenizer/rl_chat.h"

/* The request's JSON object (messages, tools, tool_choice, parallel_tool_calls) for family f,
 * whose default system turn is dflt_system (or NULL): 0 and *out; -EINVAL with why naming the
 * field (e.g. "'tools[1].function.name' ..."), -ENOTSUP when f has no tool format and tools
 * are given, -ENOMEM. The constraint is compiled (ringlm_constraint_create) here too. */
int rl_tools_create(enum rl_chat_family f, const char *dflt_system, json_t *req, struct ringlm_tools **out,
		    char *why, size_t wl);
/* The regular expression the answer is held to (NULL: none); for tests */
const char *rl_tools_regex(const struct ringlm_tools *t);
/* 1 when answers are scanned for calls (tools were given and tool_choice is not none) */
int rl_tools_parses(const struct ringlm_tools *t);

/* What the scanner finds in an answer, in order: text (the message's content), the start of
 * call k (s: its name), a piece of call k's arguments (JSON text, compact). */
enum rl_tools_ev { RL_TOOLS_TEXT, RL_TOOLS_CALL, RL_TOOLS_ARGS };
typedef void (*rl_tools_emit)(void *ctx, enum rl_tools_ev ev, int call, const char *s, size_t n);

/* The scanner of one answer (caller memory): feed it the answer's bytes as they come, end it
 * once. Text that may be the start of the call marker is held until it cannot be. */
struct rl_tools_scan {
	const struct ringlm_tools *t;
	int    st;                     /* where the answer is (chat_tools.c's enum scan_state) */
	const char *want;              /* the literal being matched, */
	size_t lit;                    /* its bytes matched so far, */
	int    after;                  /* and the state after it */
	char   hold[32];               /* text that may be the marker's start */
	size_t n_hold;
	char   name[65];               /* the call's name, as it is read */
	size_t n_name;
	int    depth, in_str, esc;     /* arguments: JSON nesting, inside a string, after a '\' */
	int    n_calls, n_done;        /* calls started, calls whose arguments are complete */
};
void rl_tools_scan_init(struct rl_tools_scan *s, const struct ringlm_tools *t);
void rl_tools_scan_feed(struct rl_tools_scan *s, const char *p, size_t n, rl_tools_emit emit, void *ctx);
void rl_tools_scan_end(struct rl_tools_scan *s, rl_tools_emit emit, void *ctx);

/* A new tool call id ("call_" and 24 hex digits, unique in the process) into buf[32] */
void rl_tools_call_id(char *buf);

#endif
