/* test_chat_tools.c — OpenAI tool calling over the chat template families (clients/chat_tools.c)
 * without a runtime: the prompt each family gets (ChatML written out by hand from Qwen2.5's
 * template), the calls' constraint (its language: calls hold to their schema, text never holds
 * the marker, by brute force against strstr), the scanner reading answers back however they are
 * cut into pieces, and the refusals, each naming its field.
 * Tests: clients (chat_tools). */
#include <errno.h>
#include "tests/rl_test.h"
#include "clients/chat_tools.h"
#include "constrain/rl_cons.h"

static int create(enum rl_chat_family f, const char *dflt, const char *req, struct ringlm_tools **t, char *why)
{
	json_error_t je;
	json_t *j = json_loads(req, 0, &je);
	if (!j) {
		fprintf(stderr, "  bad test JSON: %s\n", je.text);
		return -100;
	}
	why[0] = 0;
	int rc = rl_tools_create(f, dflt, j, t, why, 320);
	json_decref(j);
	return rc;
}

#define WEATHER "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", " \
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 20}, " \
	"\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}"
#define TIME "{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}"

static void tools_prompts_per_family(void)
{
	struct ringlm_tools *t;
	char why[320];
	/* ChatML as Qwen2.5's template writes it: the default system turn, the tools' block, a call
	 * in the history and its result in a user turn */
	REQUIRE(create(RL_CHAT_CHATML, "You are helpful.", "{\"messages\": [{\"role\": \"user\", \"content\": \"Paris?\"},"
		       " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
		       " \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
		       " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"21 C\"}], \"tools\": [" WEATHER "]}",
		       &t, why) == 0);
	const char *want =
		"<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
		"query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
		"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", "
		"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 20}, "
		"\"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a "
		"json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
		"{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
		"<|im_start|>user\nParis?<|im_end|>\n"
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
		"</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n"
		"<|im_start|>assistant\n";
	CHECKF(!strcmp(ringlm_tools_prompt(t), want), "%s", ringlm_tools_prompt(t));
	CHECK(rl_tools_parses(t) && rl_tools_regex(t));
	ringlm_tools_destroy(t);
	/* Llama 3.1's JSON calls: the tools in the first user message, results as ipython turns */
	REQUIRE(create(RL_CHAT_LLAMA3, NULL, "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": "
		       "\"user\", \"content\": \"Paris?\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": "
		       "\"get_time\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"noon\"}], \"tools\": [" TIME "]}",
		       &t, why) == 0);
	const char *p = ringlm_tools_prompt(t);
	CHECKF(strstr(p, "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
		       "\n\nGiven the following functions") && strstr(p, "{\n    \"type\": \"function\",") &&
	       strstr(p, "}\n\nParis?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_time\", "
		      "\"parameters\": {}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\nnoon<|eot_id|>"), "%s", p);
	ringlm_tools_destroy(t);
	/* Gemma: Google's prompt heads the first user turn; a result and the user's next words share a turn */
	REQUIRE(create(RL_CHAT_GEMMA, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"Time?\"}, {\"role\": "
		       "\"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"get_time\", \"arguments\": \"{}\"}}]}, "
		       "{\"role\": \"tool\", \"content\": \"noon\"}, {\"role\": \"user\", \"content\": \"Thanks\"}], "
		       "\"tools\": [" TIME "]}", &t, why) == 0);
	p = ringlm_tools_prompt(t);
	static const char gemma_head[] = "<bos><start_of_turn>user\nYou have access to functions.";
	CHECKF(!strncmp(p, gemma_head, sizeof gemma_head - 1) &&
	       strstr(p, "[\n  {\n    \"name\": \"get_time\"\n  }\n]\n\nTime?<end_of_turn>\n<start_of_turn>model\n{\"name\": "
		      "\"get_time\", \"parameters\": {}}<end_of_turn>\n<start_of_turn>user\n```tool_output\nnoon\n```\n\n"
		      "Thanks<end_of_turn>\n<start_of_turn>model\n"), "%s", p);
	ringlm_tools_destroy(t);
	/* a history with results but no tools: formatted, nothing constrained or parsed */
	REQUIRE(create(RL_CHAT_CHATML, NULL, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", &t, why) == 0);
	CHECK(!rl_tools_parses(t) && !rl_tools_regex(t) && strstr(ringlm_tools_prompt(t), "<tool_response>\nx\n"));
	ringlm_tools_destroy(t);
}

static void tools_refused_by_name(void)
{
	static const struct { enum rl_chat_family f; const char *req, *word; int rc; } bad[] = {
		{ RL_CHAT_CHATML, "{\"tools\": [{\"type\": \"function\", \"function\": {}}]}", "'tools[0].function.name'", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"parameters\": 3}}]}",
		  "'tools[0].function.parameters'", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [" TIME ", {\"type\": \"function\", \"function\": {\"name\": \"b\", \"parameters\": "
		  "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"format\": \"idn-email\"}}}}}]}",
		  "'tools[1].function.parameters': ", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"b\", \"parameters\": "
		  "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"string\", \"pattern\": \"a+\"}}}}}]}", "'pattern'",
		  -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [" TIME "], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": "
		  "\"nope\"}}}", "'tool_choice' names the function 'nope'", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [" TIME "], \"tool_choice\": \"always\"}", "'tool_choice' must be", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tool_choice\": \"required\"}", "'tool_choice' needs 'tools'", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [" TIME ", " TIME "]}", "two tools are named", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", \"x\": 1}}]}",
		  "'tools[0].function.x' is not a field", -EINVAL },
		{ RL_CHAT_CHATML, "{\"tools\": [" TIME "], \"parallel_tool_calls\": 1}", "'parallel_tool_calls'", -EINVAL },
		{ RL_CHAT_MISTRAL, "{\"tools\": [" TIME "]}", "'tools' is not supported for this model's chat template (mistral)",
		  -ENOTSUP },
		{ RL_CHAT_LLAMA3, "{\"tools\": [" TIME "], \"messages\": [{\"role\": \"system\", \"content\": \"s\"}]}",
		  "first user message", -EINVAL },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char req[1024], why[320];
		struct ringlm_tools *t = NULL;
		/* every body gets a user message unless it brings its own */
		if (strstr(bad[i].req, "\"messages\""))
			snprintf(req, sizeof req, "%s", bad[i].req);
		else
			snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s", bad[i].req + 1);
		int rc = create(bad[i].f, NULL, req, &t, why);
		CHECKF(rc == bad[i].rc && !t && strstr(why, bad[i].word) && !strchr(why, '\n'), "case %zu: rc %d, %s", i, rc, why);
	}
}

/* whole-match acceptance of s by a regex, bytewise */
static int accepts(struct rl_cons *c, const char *s, size_t n)
{
	uint32_t st = rl_cons_feed(c, rl_cons_start(c), s, n);
	return st != RL_CONS_DEAD && rl_cons_accepting(c, st);
}

static struct rl_cons *compile(const struct ringlm_tools *t, struct rl_cons_vocab *v)
{
	struct rl_cons *c = NULL;
	char err[256];
	const char *re = rl_tools_regex(t);
	if (rl_cons_compile_regex(v, re, strlen(re), NULL, &c, err, sizeof err))
		fprintf(stderr, "  compile: %s\n", err);
	return c;
}

static void tools_constraint_language(void)
{
	struct rl_cons_vocab *v;
	REQUIRE(rl_cons_vocab_create(0, NULL, NULL, NULL, NULL, 0, &v) == 0);
	static const char *const choices[] = { "\"none\"", "\"auto\"", "\"required\"",
					       "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}" };
	const char *call_w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>";
	const char *call_t = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
	for (int k = 0; k < 4; k++) {
		char req[1024], why[320], s[512];
		struct ringlm_tools *t;
		snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [" WEATHER ", "
			 TIME "], \"tool_choice\": %s}", choices[k]);
		REQUIRE(create(RL_CHAT_CHATML, NULL, req, &t, why) == 0);
		struct rl_cons *c = compile(t, v);
		REQUIRE(c);
		snprintf(s, sizeof s, "%s\n%s", call_w, call_t);
		CHECKF(accepts(c, call_w, strlen(call_w)) == (k > 0), "choice %d", k);
		CHECKF(accepts(c, call_t, strlen(call_t)) == (k == 1 || k == 2), "choice %d", k);
		CHECKF(accepts(c, s, strlen(s)) == (k == 1 || k == 2), "choice %d: two calls", k);
		snprintf(s, sizeof s, "Let me look.\n%s", call_w);
		CHECKF(accepts(c, s, strlen(s)) == (k == 1), "choice %d: text, then a call", k);
		/* the arguments hold to the schema: city is required, unit one of c/f */
		const char *bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\":\"k\"}}\n</tool_call>";
		CHECK(!accepts(c, bad, strlen(bad)));
		/* text: any without the marker (none, auto), by brute force over strings of the
		 * marker's pieces against strstr */
		static const char *const pieces[] = { "<", "<tool", "<tool_call", "<tool_call>", "_call>", "tool", "x", "\n", "é" };
		unsigned seed = 12345;
		for (int it = 0; it < 3000; it++) {
			size_t n = 0;
			for (int m = (int)((seed = seed * 1103515245 + 12345) >> 16) % 8; m >= 0; m--) {
				const char *pc = pieces[((seed = seed * 1103515245 + 12345) >> 16) % 9];
				memcpy(s + n, pc, strlen(pc));
				n += strlen(pc);
			}
			s[n] = 0;
			int want = k < 2 && !strstr(s, "<tool_call>");
			CHECKF(accepts(c, s, n) == want, "choice %d: \"%s\"", k, s);
		}
		rl_cons_destroy(c);
		ringlm_tools_destroy(t);
	}
	/* Llama 3 / Gemma auto: one call, or text that does not open like one */
	char why[320];
	struct ringlm_tools *t;
	REQUIRE(create(RL_CHAT_GEMMA, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [" TIME "]}",
		       &t, why) == 0);
	struct rl_cons *c = compile(t, v);
	REQUIRE(c);
	static const struct { const char *s; int ok; } g[] = {
		{ "{\"name\": \"get_time\", \"parameters\": {}}", 1 }, { "It is noon.", 1 }, { "", 1 }, { "{\"name", 1 },
		{ "{\"a\": 1}", 1 }, { "{\"name\": \"get_time\", \"parameters\": {}}{\"name\": \"get_time\", \"parameters\": {}}", 0 },
		{ "{\"name\": \"other\", \"parameters\": {}}", 0 }, { "{\"name\": \"get_time\"", 0 },
	};
	for (size_t i = 0; i < sizeof g / sizeof *g; i++)
		CHECKF(accepts(c, g[i].s, strlen(g[i].s)) == g[i].ok, "%s", g[i].s);
	rl_cons_destroy(c);
	ringlm_tools_destroy(t);
	rl_cons_vocab_destroy(v);
}

struct got { char text[512], args[4][256], names[4][80]; int n_calls; };

static void collect(void *ctx, enum rl_tools_ev ev, int call, const char *s, size_t n)
{
	struct got *g = ctx;
	char *dst = ev == RL_TOOLS_TEXT ? g->text : ev == RL_TOOLS_CALL ? g->names[call] : g->args[call];
	if (ev == RL_TOOLS_CALL)
		g->n_calls = call + 1;
	strncat(dst, s, n);
}

static void tools_scanner_reads_answers_in_any_pieces(void)
{
	static const struct { enum rl_chat_family f; const char *answer, *text; int n_calls; const char *names, *args; } a[] = {
		{ RL_CHAT_CHATML, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"a\":\"}\\\"{\"}}\n</tool_call>\n"
		  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>", "", 2,
		  "get_time,get_weather,", "{\"a\":\"}\\\"{\"}|{\"city\":\"Oslo\"}|" },
		{ RL_CHAT_CHATML, "Sure <tool <b>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
		  "Sure <tool <b>\n", 1, "get_time,", "{}|" },
		{ RL_CHAT_CHATML, "No calls <tool_cal", "No calls <tool_cal", 0, "", "" },
		{ RL_CHAT_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {\"x\":[1,{\"y\":2}]}}", "", 1, "get_time,",
		  "{\"x\":[1,{\"y\":2}]}|" },
		{ RL_CHAT_LLAMA3, "{\"nam", "{\"nam", 0, "", "" },
		{ RL_CHAT_GEMMA, "Noon {\"name\": \"get_time\"", "Noon {\"name\": \"get_time\"", 0, "", "" },
	};
	for (size_t i = 0; i < sizeof a / sizeof *a; i++) {
		char why[320];
		struct ringlm_tools *t;
		REQUIRE(create(a[i].f, NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [" WEATHER
			       ", " TIME "]}", &t, why) == 0);
		size_t n = strlen(a[i].answer);
		for (size_t cut1 = 0; cut1 <= n; cut1++)          /* in three pieces, cut anywhere */
			for (size_t cut2 = cut1; cut2 <= n; cut2 += 3) {
				struct got g = { 0 };
				struct rl_tools_scan s;
				rl_tools_scan_init(&s, t);
				rl_tools_scan_feed(&s, a[i].answer, cut1, collect, &g);
				rl_tools_scan_feed(&s, a[i].answer + cut1, cut2 - cut1, collect, &g);
				rl_tools_scan_feed(&s, a[i].answer + cut2, n - cut2, collect, &g);
				rl_tools_scan_end(&s, collect, &g);
				char names[256] = "", args[512] = "";
				for (int k = 0; k < g.n_calls; k++) {
					strcat(strcat(names, g.names[k]), ",");
					strcat(strcat(args, g.args[k]), "|");
				}
				CHECKF(!strcmp(g.text, a[i].text) && g.n_calls == a[i].n_calls && s.n_done == a[i].n_calls &&
				       !strcmp(names, a[i].names) && !strcmp(args, a[i].args), "answer %zu cut %zu,%zu: text '%s' "
				       "names %s args %s", i, cut1, cut2, g.text, names, args);
			}
		ringlm_tools_destroy(t);
	}
}

int main(void)
{
	RUN(tools_prompts_per_family);
	RUN(tools_refused_by_name);
	RUN(tools_constraint_language);
	RUN(tools_scanner_reads_answers_in_any_pieces);
	TEST_MAIN_END();
}
