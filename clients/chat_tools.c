/* chat_tools.c — OpenAI tool calling over the chat template families (chat_tools.h; the
 * public ringlm_tools_* of ringlm.h at the end).
 *
 * One table (fmts) says, per family, how a call is written, how the tools go into the prompt
 * and how tool results come back:
 *   ChatML   Hermes, as Qwen2.5's template writes it (SmolLM2 is ChatML too): the tools as
 *            <tools> lines in the system turn (after its text, or the template's default);
 *            calls <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, several
 *            joined by "\n", text allowed before them; results in a user turn as
 *            <tool_response>\n...\n</tool_response>, consecutive ones in one turn.
 *   Llama 3  Meta's JSON tool calling of Llama 3.1's template: the tools (indented JSON) in
 *            the first user message; a call {"name": "NAME", "parameters": ARGS}, the whole
 *            answer, one a turn; results as ipython turns.
 *   Gemma    no tool format of its own: Google's documented prompt for function calling with
 *            Gemma 3 (the JSON form, ai.google.dev/gemma/docs/capabilities/function-calling)
 *            heads the first user turn, then the functions as a JSON list; calls as Llama 3's;
 *            results in a user turn as ```tool_output\n...\n``` (the convention of Google's
 *            Gemma function-calling guide), merged with the user text after them (turns alternate).
 * Mistral and Phi-3 have no entry: tools are refused by name for them.
 *
 * The answer's constraint is one regular expression: the call format with each tool's
 * arguments as the regex its parameters schema compiles to (constrain/'s schema compiler;
 * compact JSON). tool_choice required: calls only; named: that tool's one call; auto: text
 * that cannot start a call (ChatML: text without "<tool_call>", then calls or nothing; Llama 3
 * and Gemma: a call, or text that does not start with the call's opening); none: that text
 * alone. So a call, once begun, always parses, and text never holds one. The scanner reads
 * an answer back by the same table. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "clients/chat_tools.h"
#include "clients/libringlm_internal.h"
#include "constrain/cons_sbuf.h"
#include "constrain/rl_cons.h"

#define MAX_TOOLS    128
#define MAX_NAME     64                /* OpenAI's: [a-zA-Z0-9_-]{1,64} */

enum { TJ_LINE, TJ_INDENT4, TJ_LIST };          /* how the tools are written into the prompt */
enum { IN_SYSTEM, IN_FIRST_USER };              /* where */

struct tool_fmt {
	enum rl_chat_family family;
	const char *name;              /* for messages */
	const char *marker;            /* what starts the calls of an answer: a prefix of open */
	const char *open, *mid, *close;  /* a call: open NAME mid ARGUMENTS close (mid opens with '"') */
	const char *sep;               /* between two calls of one answer; NULL: one call an answer */
	int content_first;             /* 1: text may come before the calls (the marker's first byte
					* appears in it once); 0: an answer is a call, or text */
	const char *intro, *outro;     /* the tools' block: intro, the tools, outro */
	int tool_json, tools_in;
	const char *result_role;       /* the turn a tool's result takes, */
	const char *result_open, *result_close;   /* wrapped in these, */
	const char *result_join;       /* consecutive results in one turn joined by this (NULL: a turn each) */
	int merge_user;                /* the family's turns alternate: a user message after results joins their turn */
};

static const struct tool_fmt fmts[] = {
	{ RL_CHAT_CHATML, "ChatML (Hermes)", "<tool_call>", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ",
	  "}\n</tool_call>", "\n", 1,
	  "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
	  "function signatures within <tools></tools> XML tags:\n<tools>",
	  "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
	  "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
	  "<args-json-object>}\n</tool_call>",
	  TJ_LINE, IN_SYSTEM, "user", "<tool_response>\n", "\n</tool_response>", "\n", 0 },
	{ RL_CHAT_LLAMA3, "Llama 3", "{\"name\": \"", "{\"name\": \"", "\", \"parameters\": ", "}", NULL, 0,
	  "Given the following functions, please respond with a JSON for a function call with its proper arguments "
	  "that best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
	  "dictionary of argument name and its value}.Do not use variables.\n\n", "",
	  TJ_INDENT4, IN_FIRST_USER, "ipython", "", "", NULL, 0 },
	{ RL_CHAT_GEMMA, "Gemma", "{\"name\": \"", "{\"name\": \"", "\", \"parameters\": ", "}", NULL, 0,
	  "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in the "
	  "format of\n{\"name\": function name, \"parameters\": dictionary of argument name and its value}\n\nYou "
	  "SHOULD NOT include any other text in the response if you call a function\n", "",
	  TJ_LIST, IN_SYSTEM, "user", "```tool_output\n", "\n```", "\n", 1 },
};

static const struct tool_fmt *fmt_of(enum rl_chat_family f)
{
	for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++)
		if (fmts[i].family == f)
			return &fmts[i];
	return NULL;
}

enum { TC_NONE, TC_AUTO, TC_REQUIRED, TC_NAMED };

struct tool {
	const char *name;              /* into the request's JSON (req, kept) */
	char *args_re;                 /* its parameters' regex */
};

struct ringlm_tools {
	const struct tool_fmt *fmt;    /* NULL: no tools (a history with results, say) */
	json_t *req;
	int choice, named, parallel;
	struct tool *tools;
	size_t n_tools;
	char *next;                    /* sep then open: the next call's opening */
	char *prompt, *regex;
	struct ringlm_constraint *cons;
};

/* ---- text buffers ---------------------------------------------------------------------- */
/* s as literal bytes of the regex syntax */
static void put_lit(struct rl_sb *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\n')
			rl_sb_puts(b, "\\n");
		else {
			if (strchr("\\.^$|?*+()[]{}", *s))
				rl_sb_putn(b, "\\", 1);
			rl_sb_putn(b, s, 1);
		}
	}
}
/* byte c inside a class */
static void put_cls(struct rl_sb *b, char c)
{
	if (strchr("\\]^-[", c))
		rl_sb_putn(b, "\\", 1);
	rl_sb_putn(b, &c, 1);
}

static int fail(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t wl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, wl, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* ---- the request's tools ----------------------------------------------------------------- */

static int only_keys(json_t *o, const char *const *keys, const char *where, char *why, size_t wl)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		int ok = 0;
		for (const char *const *x = keys; *x && !ok; x++)
			ok = !strcmp(k, *x);
		if (!ok)
			return fail(why, wl, "'%s.%.40s' is not a field ringlm supports; leave it out", where, k);
	}
	return 0;
}

static int valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (!n || n > MAX_NAME)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '-'))
			return 0;
	return 1;
}

static int parse_tools(struct ringlm_tools *t, enum rl_chat_family f, char *why, size_t wl)
{
	static const char *const tool_keys[] = { "type", "function", NULL };
	static const char *const fn_keys[] = { "name", "description", "parameters", "strict", NULL };
	json_t *tools = json_object_get(t->req, "tools");
	if (!tools || json_is_null(tools))
		return 0;
	size_t n = json_array_size(tools);
	if (!json_is_array(tools) || !n || n > MAX_TOOLS)
		return fail(why, wl, "'tools' must be an array of 1 to %d tools", MAX_TOOLS);
	if (!(t->fmt = fmt_of(f))) {
		fail(why, wl, "'tools' is not supported for this model's chat template (%s): ringlm writes tool calls "
		     "for ChatML (Hermes), Llama 3 and Gemma", rl_chat_name(f));
		return -ENOTSUP;
	}
	if (!(t->tools = calloc(n, sizeof *t->tools)))
		return -ENOMEM;
	t->n_tools = n;
	for (size_t i = 0; i < n; i++) {
		char where[48];
		json_t *x = json_array_get(tools, i), *fn = json_object_get(x, "function");
		snprintf(where, sizeof where, "tools[%zu]", i);
		if (!json_is_object(x) || only_keys(x, tool_keys, where, why, wl))
			return json_is_object(x) ? -EINVAL : fail(why, wl, "'%s' must be an object", where);
		const char *type = json_string_value(json_object_get(x, "type"));
		if (!type || strcmp(type, "function"))
			return fail(why, wl, "'%s.type' must be \"function\"", where);
		snprintf(where, sizeof where, "tools[%zu].function", i);
		if (!json_is_object(fn))
			return fail(why, wl, "'%s' must be an object with a 'name'", where);
		if (only_keys(fn, fn_keys, where, why, wl))
			return -EINVAL;
		const char *name = json_string_value(json_object_get(fn, "name"));
		if (!valid_name(name))
			return fail(why, wl, "'%s.name' must be 1 to %d letters, digits, '_' or '-'", where, MAX_NAME);
		for (size_t k = 0; k < i; k++)
			if (!strcmp(t->tools[k].name, name))
				return fail(why, wl, "'%s.name': two tools are named '%s'", where, name);
		t->tools[i].name = name;
		json_t *d = json_object_get(fn, "description"), *st = json_object_get(fn, "strict");
		if (d && !json_is_string(d) && !json_is_null(d))
			return fail(why, wl, "'%s.description' must be a string", where);
		if (st && !json_is_boolean(st) && !json_is_null(st))
			return fail(why, wl, "'%s.strict' must be true or false", where);
		/* the arguments: always held to the schema (strict or not); none is an empty object */
		json_t *p = json_object_get(fn, "parameters");
		const char *ptype = json_string_value(json_object_get(p, "type"));
		if (p && !json_is_null(p) && (!json_is_object(p) || !ptype || strcmp(ptype, "object")))
			return fail(why, wl, "'%s.parameters' must be a JSON Schema object with \"type\": \"object\"", where);
		char *schema = p && !json_is_null(p) ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) :
			       strdup("{\"type\":\"object\",\"properties\":{}}");
		char e[256];
		if (!schema)
			return -ENOMEM;
		int rc = rl_cons_schema_to_regex(schema, strlen(schema), RL_CONS_NO_EXTRA_KEYS, &t->tools[i].args_re, e,
						 sizeof e);
		free(schema);
		if (rc)
			return rc == -ENOMEM ? rc : fail(why, wl, "'%s.parameters': %s", where, e);
		/* the engine's string patterns are its own regex syntax, which a client's regex
		 * constraint (what the call's is) cannot carry */
		if (strstr(t->tools[i].args_re, "(?J:"))
			return fail(why, wl, "'%s.parameters': 'pattern' is not supported in a tool's parameters", where);
	}
	return 0;
}

static int parse_choice(struct ringlm_tools *t, char *why, size_t wl)
{
	json_t *c = json_object_get(t->req, "tool_choice"), *par = json_object_get(t->req, "parallel_tool_calls");
	const char *s = json_string_value(c);
	t->choice = t->fmt ? TC_AUTO : TC_NONE;
	t->parallel = 1;
	if (par && !json_is_null(par)) {
		if (!json_is_boolean(par))
			return fail(why, wl, "'parallel_tool_calls' must be true or false");
		if (!t->fmt)
			return fail(why, wl, "'parallel_tool_calls' needs 'tools'");
		t->parallel = json_is_true(par);
	}
	if (!c || json_is_null(c))
		return 0;
	if (s && !strcmp(s, "none")) {
		t->choice = TC_NONE;
		return 0;
	}
	if (!t->fmt)
		return fail(why, wl, "'tool_choice' needs 'tools'");
	if (s && (!strcmp(s, "auto") || !strcmp(s, "required"))) {
		t->choice = !strcmp(s, "auto") ? TC_AUTO : TC_REQUIRED;
		return 0;
	}
	const char *type = json_string_value(json_object_get(c, "type"));
	const char *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
	if (!json_is_object(c) || !type || strcmp(type, "function") || !name)
		return fail(why, wl, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
			    "\"function\": {\"name\": ...}}");
	for (size_t i = 0; i < t->n_tools; i++)
		if (!strcmp(t->tools[i].name, name)) {
			t->choice = TC_NAMED;
			t->named = (int)i;
			return 0;
		}
	return fail(why, wl, "'tool_choice' names the function '%.64s', which is not among 'tools'", name);
}

/* ---- the prompt ---------------------------------------------------------------------- */

static int tools_block(const struct ringlm_tools *t, struct rl_sb *b)
{
	const struct tool_fmt *f = t->fmt;
	json_t *tools = json_object_get(t->req, "tools"), *x, *list = NULL;
	size_t i;
	rl_sb_puts(b, f->intro);
	if (f->tool_json == TJ_LIST && !(list = json_array()))
		return -ENOMEM;
	json_array_foreach(tools, i, x) {
		if (list) {
			json_array_append(list, json_object_get(x, "function"));
			continue;
		}
		char *s = json_dumps(x, JSON_PRESERVE_ORDER | (f->tool_json == TJ_INDENT4 ? JSON_INDENT(4) : 0));
		if (!s)
			return -ENOMEM;
		rl_sb_puts(b, f->tool_json == TJ_LINE ? "\n" : "");
		rl_sb_puts(b, s);
		rl_sb_puts(b, f->tool_json == TJ_INDENT4 ? "\n\n" : "");
		free(s);
	}
	if (list) {
		char *s = json_dumps(list, JSON_PRESERVE_ORDER | JSON_INDENT(2));
		json_decref(list);
		if (!s)
			return -ENOMEM;
		rl_sb_puts(b, s);
		free(s);
	}
	rl_sb_puts(b, f->outro);
	return b->oom ? -ENOMEM : 0;
}

struct turn { const char *role; struct rl_sb text; int result; };

static struct turn *turn_new(struct turn *ts, size_t *n, const char *role)
{
	ts[*n] = (struct turn){ .role = role };
	rl_sb_puts(&ts[*n].text, "");
	return &ts[(*n)++];
}

/* An assistant message's calls as the family writes them into its turn */
static int put_calls(const struct tool_fmt *f, json_t *calls, size_t mi, struct rl_sb *b, char *why, size_t wl)
{
	size_t k;
	json_t *c;
	if (!f->sep && json_array_size(calls) > 1)
		return fail(why, wl, "'messages[%zu].tool_calls': %s's format has one call a turn", mi, f->name);
	json_array_foreach(calls, k, c) {
		json_t *fn = json_object_get(c, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		const char *args = json_string_value(json_object_get(fn, "arguments"));
		json_t *parsed = args ? json_loads(args, 0, NULL) : NULL;
		if (!name || !parsed || !json_is_object(parsed)) {
			json_decref(parsed);
			return fail(why, wl, "'messages[%zu].tool_calls[%zu]' needs 'function': {\"name\": ..., \"arguments\": "
				    "a string of a JSON object}", mi, k);
		}
		json_decref(parsed);
		if (k)
			rl_sb_puts(b, f->sep);
		rl_sb_puts(b, f->open);
		rl_sb_puts(b, name);
		rl_sb_puts(b, f->mid);
		rl_sb_puts(b, args);          /* as given, as the templates write a string's arguments */
		rl_sb_puts(b, f->close);
	}
	return 0;
}

/* The messages as the family's plain turns (tools and results written in), then the template */
static int render(struct ringlm_tools *t, enum rl_chat_family f, const char *dflt, char *why, size_t wl)
{
	const struct tool_fmt *tf = t->fmt ? t->fmt : fmt_of(f);
	json_t *msgs = json_object_get(t->req, "messages");
	size_t nm = json_array_size(msgs), n = 0;
	if (!nm)
		return fail(why, wl, "'messages' must be a non-empty array");
	struct turn *ts = calloc(nm + 1, sizeof *ts);
	struct rl_sb block = { 0 };
	int rc = 0, tools_put = !t->fmt;
	if (!ts)
		return -ENOMEM;
	if (t->fmt && (rc = tools_block(t, &block)))
		goto out;
	for (size_t i = 0; i < nm && !rc; i++) {
		json_t *m = json_array_get(msgs, i), *cj = json_object_get(m, "content");
		json_t *calls = json_object_get(m, "tool_calls");
		const char *role = json_string_value(json_object_get(m, "role")), *content = json_string_value(cj);
		int is_asst = role && !strcmp(role, "assistant");
		int has_calls = calls && !json_is_null(calls);
		if (!role || (strcmp(role, "system") && strcmp(role, "user") && !is_asst && strcmp(role, "tool"))) {
			rc = fail(why, wl, "'messages[%zu].role' must be system, user, assistant or tool", i);
			break;
		}
		if (!content && !(is_asst && has_calls && (!cj || json_is_null(cj)))) {
			rc = fail(why, wl, "'messages[%zu].content' must be a string%s", i, is_asst ? " (or null with tool_calls)" : "");
			break;
		}
		if (has_calls && (!is_asst || !json_is_array(calls) || !json_array_size(calls))) {
			rc = fail(why, wl, "'messages[%zu].tool_calls' must be a non-empty array, on an assistant message", i);
			break;
		}
		if ((has_calls || !strcmp(role, "tool")) && !tf) {
			rc = fail(why, wl, "'messages[%zu]': tool calls and results are not supported for this model's chat "
				  "template (%s)", i, rl_chat_name(f));
			break;
		}
		struct turn *prev = n ? &ts[n - 1] : NULL, *x;
		if (!strcmp(role, "system")) {
			x = turn_new(ts, &n, "system");
			rl_sb_puts(&x->text, content);
			if (!tools_put && tf->tools_in == IN_SYSTEM && i == 0) {
				rl_sb_puts(&x->text, *content ? "\n\n" : "");
				rl_sb_puts(&x->text, block.p);
				tools_put = 1;
			}
		} else if (!strcmp(role, "tool")) {
			if (prev && prev->result && tf->result_join) {
				x = prev;
				rl_sb_puts(&x->text, tf->result_join);
			} else {
				x = turn_new(ts, &n, tf->result_role);
				x->result = 1;
			}
			rl_sb_puts(&x->text, tf->result_open);
			rl_sb_puts(&x->text, content);
			rl_sb_puts(&x->text, tf->result_close);
		} else if (is_asst) {
			x = turn_new(ts, &n, "assistant");
			if (content && (!has_calls || tf->content_first)) {
				rl_sb_puts(&x->text, content);
				rl_sb_puts(&x->text, has_calls && *content ? "\n" : "");
			}
			if (has_calls)
				rc = put_calls(tf, calls, i, &x->text, why, wl);
		} else {
			if (prev && prev->result && tf && tf->merge_user) {
				x = prev;
				rl_sb_puts(&x->text, "\n\n");
			} else {
				x = turn_new(ts, &n, "user");
			}
			if (!tools_put && tf->tools_in == IN_FIRST_USER) {
				rl_sb_puts(&x->text, block.p);
				tools_put = 1;
			}
			rl_sb_puts(&x->text, content);
		}
	}
	if (!rc && !tools_put && t->fmt->tools_in == IN_SYSTEM) {   /* no system message: one opens the turns */
		memmove(ts + 1, ts, n * sizeof *ts);
		n++;
		ts[0] = (struct turn){ .role = "system" };
		rl_sb_puts(&ts[0].text, dflt && *dflt ? dflt : "");
		rl_sb_puts(&ts[0].text, dflt && *dflt ? "\n\n" : "");
		rl_sb_puts(&ts[0].text, block.p);
	} else if (!rc && !tools_put) {
		rc = fail(why, wl, "'tools': %s's format puts the tools in the first user message, and there is none",
			  t->fmt->name);
	}
	for (size_t i = 0; i < n && !rc; i++)
		if (ts[i].text.oom)
			rc = -ENOMEM;
	if (!rc) {
		struct rl_chat_msg *cm = calloc(n, sizeof *cm);
		long len = -ENOMEM;
		for (size_t i = 0; cm && i < n; i++)
			cm[i] = (struct rl_chat_msg){ ts[i].role, ts[i].text.p };
		if (cm && (len = rl_chat_format(f, dflt, cm, n, NULL, 0)) >= 0 && (t->prompt = malloc((size_t)len + 1)))
			rl_chat_format(f, dflt, cm, n, t->prompt, (size_t)len + 1);
		free(cm);
		if (len == -EINVAL)
			rc = fail(why, wl, "'messages' do not fit the %s template (its turns must alternate user/assistant "
				  "and end with user or tool)", rl_chat_name(f));
		else if (len < 0 || !t->prompt)
			rc = -ENOMEM;
	}
out:
	for (size_t i = 0; i < n; i++)
		free(ts[i].text.p);
	free(ts);
	free(block.p);
	return rc;
}

/* ---- the constraint ------------------------------------------------------------------- */

/* Text that does not start with m: a proper prefix of it, or one that leaves it at byte i */
static void not_starting(struct rl_sb *b, const char *m)
{
	size_t k = strlen(m);
	rl_sb_puts(b, "(?:");
	for (size_t i = 0; i < k; i++) {
		char pre[64];
		snprintf(pre, sizeof pre, "%.*s", (int)i, m);
		rl_sb_puts(b, i ? "|" : "");
		put_lit(b, pre);
		rl_sb_puts(b, "(?:[^");
		put_cls(b, m[i]);
		rl_sb_puts(b, "][\\s\\S]*)?");
	}
	rl_sb_puts(b, ")");
}

/* Text without m, whose first byte c0 appears in it once: from "no part of m" (state 0) a
 * c0 starts a match of m[0..j); at j the next byte continues it (m[j]), restarts it (c0) or
 * drops it (anything else). So: (A | c0 L* E)* (c0 L* P)?, with A any byte but c0, L the
 * runs m[1..j) c0 that restart, E the runs m[1..j) x (x neither m[j] nor c0) that drop back
 * to state 0, P the proper prefixes m[1..j) an answer may end in. */
static void without(struct rl_sb *b, const char *m)
{
	size_t k = strlen(m);
	char c0 = m[0];
	struct rl_sb l = { 0 }, e = { 0 }, p = { 0 };
	for (size_t j = 1; j < k; j++) {
		char mid[64];
		snprintf(mid, sizeof mid, "%.*s", (int)(j - 1), m + 1);
		rl_sb_puts(&l, j > 1 ? "|" : "(?:");
		put_lit(&l, mid);
		put_cls(&l, c0);               /* c0 is no class metacharacter here: put_cls escapes alike */
		rl_sb_puts(&e, j > 1 ? "|" : "(?:");
		put_lit(&e, mid);
		rl_sb_puts(&e, "[^");
		put_cls(&e, m[j]);
		put_cls(&e, c0);
		rl_sb_puts(&e, "]");
		rl_sb_puts(&p, j > 1 ? "|" : "(?:");
		put_lit(&p, mid);
	}
	rl_sb_puts(&l, ")*");
	rl_sb_puts(&e, ")");
	rl_sb_puts(&p, ")");
	char c0s[2] = { c0, 0 };
	rl_sb_puts(b, "(?:(?:[^");
	put_cls(b, c0);
	rl_sb_puts(b, "]|");
	put_lit(b, c0s);
	rl_sb_puts(b, l.p);
	rl_sb_puts(b, e.p);
	rl_sb_puts(b, ")*(?:");
	put_lit(b, c0s);
	rl_sb_puts(b, l.p);
	rl_sb_puts(b, p.p);
	rl_sb_puts(b, ")?)");
	b->oom |= l.oom | e.oom | p.oom;
	free(l.p);
	free(e.p);
	free(p.p);
}

static void one_call(struct rl_sb *b, const struct tool_fmt *f, const struct tool *x)
{
	put_lit(b, f->open);
	put_lit(b, x->name);
	put_lit(b, f->mid);
	rl_sb_puts(b, "(?:");
	rl_sb_puts(b, x->args_re);
	rl_sb_puts(b, ")");
	put_lit(b, f->close);
}

static int build_regex(struct ringlm_tools *t)
{
	const struct tool_fmt *f = t->fmt;
	struct rl_sb any = { 0 }, b = { 0 };
	if (!f)
		return 0;
	if (t->choice == TC_NAMED) {
		one_call(&any, f, &t->tools[t->named]);
	} else {
		rl_sb_puts(&any, "(?:");
		for (size_t i = 0; i < t->n_tools; i++) {
			rl_sb_puts(&any, i ? "|" : "");
			one_call(&any, f, &t->tools[i]);
		}
		rl_sb_puts(&any, ")");
	}
	struct rl_sb calls = { 0 };
	rl_sb_puts(&calls, any.p);
	if (t->parallel && f->sep && t->choice != TC_NAMED) {
		rl_sb_puts(&calls, "(?:");
		put_lit(&calls, f->sep);
		rl_sb_puts(&calls, any.p);
		rl_sb_puts(&calls, ")*");
	}
	switch (t->choice) {
	case TC_REQUIRED:
	case TC_NAMED:
		rl_sb_puts(&b, calls.p);
		break;
	case TC_AUTO:
		if (f->content_first) {
			without(&b, f->marker);
			rl_sb_puts(&b, "(?:");
			rl_sb_puts(&b, calls.p);
			rl_sb_puts(&b, ")?");
		} else {
			rl_sb_puts(&b, "(?:");
			rl_sb_puts(&b, calls.p);
			rl_sb_puts(&b, "|");
			not_starting(&b, f->marker);
			rl_sb_puts(&b, ")");
		}
		break;
	default:
		(f->content_first ? without : not_starting)(&b, f->marker);
	}
	int oom = any.oom || calls.oom || b.oom;
	free(any.p);
	free(calls.p);
	if (oom) {
		free(b.p);
		return -ENOMEM;
	}
	t->regex = b.p;
	return 0;
}

/* ---- the handle ----------------------------------------------------------------------- */

static void tools_free(struct ringlm_tools *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n_tools; i++)
		free(t->tools[i].args_re);
	free(t->tools);
	free(t->next);
	free(t->prompt);
	free(t->regex);
	ringlm_constraint_destroy(t->cons);
	json_decref(t->req);
	free(t);
}

int rl_tools_create(enum rl_chat_family f, const char *dflt_system, json_t *req, struct ringlm_tools **out,
		    char *why, size_t wl)
{
	struct ringlm_tools *t = calloc(1, sizeof *t);
	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->req = json_incref(req);
	int rc = parse_tools(t, f, why, wl);
	if (!rc)
		rc = parse_choice(t, why, wl);
	if (!rc)
		rc = render(t, f, dflt_system, why, wl);
	if (!rc)
		rc = build_regex(t);
	if (!rc && t->fmt && t->fmt->sep && asprintf(&t->next, "%s%s", t->fmt->sep, t->fmt->open) < 0)
		rc = -ENOMEM;
	if (!rc && t->regex && (rc = ringlm_constraint_create(RINGLM_CONSTRAINT_REGEX, t->regex, strlen(t->regex), &t->cons))) {
		const char *e = ringlm_last_error(), *colon = strstr(e, ": ");
		snprintf(why, wl, "'tools': the calls' constraint: %s", colon ? colon + 2 : e);
	}
	if (rc == -ENOMEM)
		snprintf(why, wl, "out of memory");
	if (rc) {
		tools_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

const char *rl_tools_regex(const struct ringlm_tools *t)
{
	return t->regex;
}

int rl_tools_parses(const struct ringlm_tools *t)
{
	return t->fmt && t->choice != TC_NONE;
}

void rl_tools_call_id(char *buf)
{
	static _Atomic uint64_t counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t a = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, n = atomic_fetch_add(&counter, 1);
	uint64_t h = (a ^ (n * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
	snprintf(buf, 32, "call_%016llx%08x", (unsigned long long)h, (unsigned)(n & 0xffffffffu));
}

/* ---- the scanner ---------------------------------------------------------------------- */

enum scan_state { SC_OFF, SC_TEXT, SC_LIT, SC_NAME, SC_ARGS, SC_AFTER, SC_PLAIN };

/* consecutive bytes of one kind, handed out together */
struct run { rl_tools_emit emit; void *ctx; enum rl_tools_ev ev; int call; const char *p; size_t n; };

static void run_flush(struct run *r)
{
	if (r->n)
		r->emit(r->ctx, r->ev, r->call, r->p, r->n);
	r->n = 0;
}

static void run_put(struct run *r, enum rl_tools_ev ev, int call, const char *p)
{
	if (r->n && (r->ev != ev || r->call != call || r->p + r->n != p))
		run_flush(r);
	if (!r->n) {
		r->ev = ev;
		r->call = call;
		r->p = p;
	}
	r->n++;
}

static void run_out(struct run *r, enum rl_tools_ev ev, int call, const char *s, size_t n)
{
	run_flush(r);
	if (n)
		r->emit(r->ctx, ev, call, s, n);
}

void rl_tools_scan_init(struct rl_tools_scan *s, const struct ringlm_tools *t)
{
	memset(s, 0, sizeof *s);
	s->t = t;
	if (!rl_tools_parses(t))
		s->st = SC_OFF;
	else if (t->fmt->content_first)
		s->st = SC_TEXT;
	else {                             /* the answer is a call when it opens like one */
		s->st = SC_LIT;
		s->want = t->fmt->open;
		s->after = SC_NAME;
	}
}

/* a literal did not follow: what was matched of it, and what comes after, is text */
static void to_plain(struct rl_tools_scan *s, struct run *r)
{
	if (s->st == SC_LIT)
		run_out(r, RL_TOOLS_TEXT, 0, s->want, s->lit);
	else if (s->st == SC_NAME) {
		run_out(r, RL_TOOLS_TEXT, 0, s->t->fmt->open, strlen(s->t->fmt->open));
		run_out(r, RL_TOOLS_TEXT, 0, s->name, s->n_name);
	}
	s->st = SC_PLAIN;
}

void rl_tools_scan_feed(struct rl_tools_scan *s, const char *p, size_t n, rl_tools_emit emit, void *ctx)
{
	const struct tool_fmt *f = s->t->fmt;
	struct run r = { emit, ctx, RL_TOOLS_TEXT, 0, NULL, 0 };
	for (size_t i = 0; i < n; i++) {
		const char c = p[i];
		switch (s->st) {
		case SC_OFF:
		case SC_PLAIN:
			run_put(&r, RL_TOOLS_TEXT, 0, p + i);
			break;
		case SC_TEXT:
			if (s->n_hold || c == f->marker[0]) {
				if (c == f->marker[s->n_hold]) {
					s->hold[s->n_hold++] = c;
					if (!f->marker[s->n_hold]) {       /* the calls begin */
						s->n_hold = 0;
						run_flush(&r);
						s->st = SC_LIT;
						s->want = f->open;
						s->lit = strlen(f->marker);
						s->after = SC_NAME;
						if (!f->open[s->lit])
							s->st = SC_NAME;
					}
					break;
				}
				run_out(&r, RL_TOOLS_TEXT, 0, s->hold, s->n_hold);   /* c0 appears once in the marker */
				s->n_hold = 0;
				if (c == f->marker[0]) {
					s->hold[s->n_hold++] = c;
					break;
				}
			}
			run_put(&r, RL_TOOLS_TEXT, 0, p + i);
			break;
		case SC_LIT:
			if (c != s->want[s->lit]) {
				to_plain(s, &r);
				run_put(&r, RL_TOOLS_TEXT, 0, p + i);
				break;
			}
			if (!s->want[++s->lit]) {
				s->st = s->after;
				s->lit = 0;
				if (s->st == SC_NAME)
					s->n_name = 0;
			}
			break;
		case SC_NAME:
			if (c == '"' && s->n_name) {
				s->name[s->n_name] = 0;
				run_out(&r, RL_TOOLS_CALL, s->n_calls++, s->name, s->n_name);
				s->st = SC_LIT;
				s->want = f->mid;
				s->lit = 1;            /* mid opens with the name's closing quote */
				s->after = SC_ARGS;
				s->depth = s->in_str = s->esc = 0;
			} else if (s->n_name < MAX_NAME && c != '"' && c != '\\') {
				s->name[s->n_name++] = c;
			} else {
				to_plain(s, &r);
				run_put(&r, RL_TOOLS_TEXT, 0, p + i);
			}
			break;
		case SC_ARGS:
			run_put(&r, RL_TOOLS_ARGS, s->n_calls - 1, p + i);
			if (s->in_str) {
				if (s->esc)
					s->esc = 0;
				else if (c == '\\')
					s->esc = 1;
				else if (c == '"')
					s->in_str = 0;
			} else if (c == '"') {
				s->in_str = 1;
			} else if (c == '{' || c == '[') {
				s->depth++;
			} else if (c == '}' || c == ']') {
				s->depth--;
			}
			if (!s->in_str && s->depth == 0 && (c == '}' || c == ']')) {   /* the arguments are whole */
				s->n_done++;
				s->st = SC_LIT;
				s->want = f->close;
				s->lit = 0;
				s->after = SC_AFTER;
				if (!*f->close)
					s->st = SC_AFTER;
			}
			break;
		case SC_AFTER:
			if (f->sep && s->t->parallel && s->t->choice != TC_NAMED) {
				s->st = SC_LIT;
				s->want = s->t->next;
				s->lit = 0;
				s->after = SC_NAME;
				i--;                   /* this byte, against the next call's opening */
			} else {
				s->st = SC_PLAIN;
				run_put(&r, RL_TOOLS_TEXT, 0, p + i);
			}
			break;
		}
	}
	run_flush(&r);
}

void rl_tools_scan_end(struct rl_tools_scan *s, rl_tools_emit emit, void *ctx)
{
	struct run r = { emit, ctx, RL_TOOLS_TEXT, 0, NULL, 0 };
	if (s->st == SC_TEXT)
		run_out(&r, RL_TOOLS_TEXT, 0, s->hold, s->n_hold);
	else if (s->st == SC_LIT && !s->n_calls)   /* an answer that began like a call and stopped */
		to_plain(s, &r);
	s->n_hold = 0;
	s->st = SC_PLAIN;
}

/* ---- the public calls (ringlm.h) ------------------------------------------------------- */

int ringlm_tools_create(struct ringlm *c, const char *request, size_t len, struct ringlm_tools **out)
{
	if (!c || !request || !out)
		return rl_client_fail(-EINVAL, "ringlm_tools_create: c, request or out is NULL");
	*out = NULL;
	enum rl_chat_family f = rl_chat_from_name(c->info->chat_template);
	if (!f)
		return rl_client_fail(-ENOTSUP, "ringlm_tools_create: the model has no chat template ringlm knows "
				      "(Llama 3, ChatML, Mistral, Phi-3, Gemma): format the prompt yourself");
	json_error_t je;
	json_t *req = json_loadb(request, len, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(req)) {
		json_decref(req);
		return rl_client_fail(-EINVAL, "ringlm_tools_create: the request is not a JSON object (%s)",
				      req ? "another value" : je.text);
	}
	char why[320];
	int rc = rl_tools_create(f, c->info->chat_system, req, out, why, sizeof why);
	json_decref(req);
	return rc ? rl_client_fail(rc, "ringlm_tools_create: %s", why) : 0;
}

const char *ringlm_tools_prompt(const struct ringlm_tools *t)
{
	return t ? t->prompt : NULL;
}

const struct ringlm_constraint *ringlm_tools_constraint(const struct ringlm_tools *t)
{
	return t ? t->cons : NULL;
}

struct parsed { struct rl_sb text; json_t *calls; };

static void parse_emit(void *ctx, enum rl_tools_ev ev, int call, const char *s, size_t n)
{
	struct parsed *p = ctx;
	if (ev == RL_TOOLS_TEXT) {
		rl_sb_putn(&p->text, s, n);
	} else if (ev == RL_TOOLS_CALL) {
		char id[32];
		rl_tools_call_id(id);
		json_array_append_new(p->calls, json_pack("{s:s, s:s, s:{s:o, s:s}}", "id", id, "type", "function",
							  "function", "name", json_stringn(s, n), "arguments", ""));
	} else {
		json_t *fn = json_object_get(json_array_get(p->calls, (size_t)call), "function");
		const char *a = json_string_value(json_object_get(fn, "arguments"));
		size_t al = json_string_length(json_object_get(fn, "arguments"));
		char *x = a ? malloc(al + n) : NULL;
		if (!x)
			return;
		memcpy(x, a, al);
		memcpy(x + al, s, n);
		json_object_set_new(fn, "arguments", json_stringn(x, al + n));
		free(x);
	}
}

int ringlm_tools_parse(const struct ringlm_tools *t, const char *text, size_t len, char *out, size_t cap)
{
	if (!t || (!text && len) || (cap && !out))
		return rl_client_fail(-EINVAL, "ringlm_tools_parse: t or text is NULL, or out is with cap");
	struct parsed p = { { 0 }, json_array() };
	struct rl_tools_scan s;
	rl_tools_scan_init(&s, t);
	rl_tools_scan_feed(&s, text, len, parse_emit, &p);
	rl_tools_scan_end(&s, parse_emit, &p);
	/* with calls, the text around them is whitespace or a preface: trimmed, null when empty */
	const char *b = p.text.p ? p.text.p : "";
	size_t n = p.text.n;
	if (json_array_size(p.calls)) {
		while (n && strchr(" \t\r\n", *b)) {
			b++;
			n--;
		}
		while (n && strchr(" \t\r\n", b[n - 1]))
			n--;
	}
	json_t *j = json_pack("{s:o}", "content", n || !json_array_size(p.calls) ? json_stringn(b, n) : json_null());
	if (json_array_size(p.calls))
		json_object_set(j, "tool_calls", p.calls);
	json_decref(p.calls);
	char *s2 = j && !p.text.oom ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	free(p.text.p);
	if (!s2)
		return rl_client_fail(-ENOMEM, "ringlm_tools_parse: out of memory (or the text is not UTF-8)");
	size_t sl = strlen(s2);
	if (cap)
		snprintf(out, cap, "%s", s2);
	free(s2);
	return sl > INT32_MAX ? rl_client_fail(-E2BIG, "ringlm_tools_parse: the answer is too long") : (int)sl;
}

void ringlm_tools_destroy(struct ringlm_tools *t)
{
	tools_free(t);
}
