/* test_http_req.c — the HTTP front's request parsing and validation without a server
 * (clients/http/http_req.c): what a valid body becomes, and that every bad one is refused in
 * one line that names the parameter, with the kind the error counters use.
 * Tests: clients/http (http_req). */
#include "tests/rl_test.h"
#include "clients/http/http_req.h"

static const struct http_limits lim = { 256, 1000, 512, 1, "chatml" };

static int parse(const char *body, int chat, struct http_req *r, char *why)
{
	return http_req_parse(body, strlen(body), chat, &lim, r, why, 256);
}

static void valid_bodies(void)
{
	struct http_req r;
	char why[256];
	REQUIRE(parse("{\"prompt\": \"Once\", \"max_tokens\": 5, \"temperature\": 0, \"seed\": 7, \"stop\": [\"a\", \"bc\"],"
		       " \"n\": 2, \"logprobs\": 3, \"stream\": true, \"top_k\": 40, \"top_p\": 0.9}", 0, &r, why) == 0);
	CHECK(r.text && !strcmp(r.text, "Once") && !r.ids && r.max_tokens == 5 && r.temperature == 0 && r.has_seed &&
	      r.seed == 7 && r.n_stops == 2 && !strcmp(r.stops[1], "bc") && r.n == 2 && r.lp_on && r.lp_top == 3 &&
	      r.stream && r.top_k == 40 && r.top_p == 0.9f && !r.chat);
	http_req_free(&r);
	/* defaults: 16 tokens, temperature 1, no seed; ids as the prompt; a one-string array */
	REQUIRE(parse("{\"prompt\": [1, 2, 999]}", 0, &r, why) == 0);
	CHECK(r.n_ids == 3 && r.ids[2] == 999 && r.max_tokens == 16 && r.temperature == 1 && !r.has_seed && r.n == 1 &&
	      !r.stream && !r.lp_on);
	http_req_free(&r);
	REQUIRE(parse("{\"prompt\": [\"x\"], \"stop\": \"s\"}", 0, &r, why) == 0);
	CHECK(r.text && !strcmp(r.text, "x") && r.n_stops == 1);
	http_req_free(&r);
	/* chat: messages kept for the template; the runtime's max_new by default */
	REQUIRE(parse("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
		       "\"content\": \"Hi\"}], \"logprobs\": true, \"top_logprobs\": 2, \"max_completion_tokens\": 9}", 1, &r,
		       why) == 0);
	CHECK(r.chat && r.n_msgs == 2 && !strcmp(r.msgs[1].role, "user") && !strcmp(r.msgs[1].content, "Hi") &&
	      r.lp_on && r.lp_top == 2 && r.max_tokens == 9 && !r.text);
	http_req_free(&r);
	REQUIRE(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}", 1, &r, why) == 0);
	CHECK(r.max_tokens == 256 && !r.schema && !r.deterministic);
	http_req_free(&r);
	/* ringlm's own: the deterministic mode */
	REQUIRE(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"deterministic\": true}", 1, &r, why) == 0);
	CHECK(r.deterministic);
	http_req_free(&r);
	REQUIRE(parse("{\"prompt\": \"x\", \"deterministic\": true}", 0, &r, why) == 0);
	CHECK(r.deterministic);
	http_req_free(&r);
	/* response_format: the schema kept as compact JSON in its own order, for the engine */
	REQUIRE(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"response_format\": {\"type\": "
		      "\"json_schema\", \"json_schema\": {\"name\": \"p\", \"strict\": true, \"schema\": {\"type\": \"object\", "
		      "\"properties\": {\"b\": {\"type\": \"integer\"}, \"a\": {\"type\": \"string\"}}}}}}", 1, &r, why) == 0);
	CHECK(r.schema && !strcmp(r.schema, "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"},"
				    "\"a\":{\"type\":\"string\"}}}"));
	http_req_free(&r);
	REQUIRE(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"response_format\": {\"type\": \"text\"}}",
		      1, &r, why) == 0);
	CHECK(!r.schema);
	http_req_free(&r);
	/* tools, or a history with calls or results: the body is the tools' formatter's (chat_tools.c) */
	REQUIRE(parse("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": [], \"tool_choice\": "
		      "\"auto\", \"parallel_tool_calls\": false}", 1, &r, why) == 0);
	CHECK(r.tools && !r.msgs);
	http_req_free(&r);
	REQUIRE(parse("{\"messages\": [{\"role\": \"tool\", \"content\": \"21 C\"}]}", 1, &r, why) == 0);
	CHECK(r.tools && !r.msgs);
	http_req_free(&r);
	/* echo lets max_tokens be 0 (scoring the prompt) */
	REQUIRE(parse("{\"prompt\": \"x\", \"echo\": true, \"max_tokens\": 0, \"logprobs\": 0}", 0, &r, why) == 0);
	CHECK(r.echo && r.max_tokens == 0 && r.lp_on && r.lp_top == 0);
	http_req_free(&r);
}

static void bad_bodies_named(void)
{
	static const struct { int chat; const char *body; int kind; const char *says; } c[] = {
		{ 0, "not json", HTTP_REQ_BAD_JSON, "not a JSON object" },
		{ 0, "[1, 2]", HTTP_REQ_BAD_JSON, "not an object" },
		{ 0, "{\"prompt\": \"x\", \"frobnicate\": 1}", HTTP_REQ_BAD, "'frobnicate' is not a parameter" },
		{ 1, "{\"messages\": [], \"echo\": true}", HTTP_REQ_BAD, "'echo' is not a parameter" },
		{ 0, "{\"prompt\": \"x\", \"presence_penalty\": 0.5}", HTTP_REQ_BAD, "'presence_penalty' is not supported" },
		{ 0, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": 2}}", HTTP_REQ_BAD, "'logit_bias' is not supported" },
		{ 0, "{\"prompt\": \"x\", \"suffix\": \"y\"}", HTTP_REQ_BAD, "'suffix' is not supported" },
		{ 0, "{\"prompt\": \"x\", \"best_of\": 2}", HTTP_REQ_BAD, "'best_of' must be" },
		{ 0, "{\"prompt\": \"x\", \"logprobs\": 21}", HTTP_REQ_BAD, "'logprobs' must be a number in [0, 20]" },
		{ 0, "{\"prompt\": \"x\", \"logprobs\": 1.5}", HTTP_REQ_BAD, "'logprobs' must be a whole number" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", HTTP_REQ_BAD,
		  "'top_logprobs' needs 'logprobs': true" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}", HTTP_REQ_BAD,
		  "'logprobs' must be true or false" },
		{ 0, "{\"prompt\": \"x\", \"stream\": 1}", HTTP_REQ_BAD, "'stream' must be true or false" },
		{ 0, "{\"prompt\": \"x\", \"max_tokens\": 0}", HTTP_REQ_BAD, "'max_tokens' must be a number in [1, 256]" },
		{ 0, "{\"prompt\": \"x\", \"max_tokens\": 257}", HTTP_REQ_BAD, "'max_tokens'" },
		{ 0, "{\"prompt\": \"x\", \"temperature\": 3}", HTTP_REQ_BAD, "'temperature'" },
		{ 0, "{\"prompt\": \"x\", \"top_p\": 0}", HTTP_REQ_BAD, "'top_p' must be in (0, 1]" },
		{ 0, "{\"prompt\": \"x\", \"top_k\": 1001}", HTTP_REQ_BAD, "'top_k'" },
		{ 0, "{\"prompt\": \"x\", \"n\": 17}", HTTP_REQ_BAD, "'n' must be a number in [1, 16]" },
		{ 0, "{\"prompt\": \"x\", \"n\": 1.5}", HTTP_REQ_BAD, "'n' must be a whole number" },
		{ 0, "{\"prompt\": \"x\", \"stop\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", HTTP_REQ_BAD, "'stop' must be" },
		{ 0, "{\"prompt\": \"x\", \"stop\": [\"\"]}", HTTP_REQ_BAD, "'stop' must be" },
		{ 0, "{\"prompt\": 5}", HTTP_REQ_BAD, "'prompt' must be a string or a non-empty array" },
		{ 0, "{\"prompt\": []}", HTTP_REQ_BAD, "'prompt' must be" },
		{ 0, "{\"prompt\": [1, 1000]}", HTTP_REQ_BAD, "prompt[1] is not a token id below 1000" },
		{ 0, "{\"prompt\": [1, -1]}", HTTP_REQ_BAD, "prompt[1] is not a token id" },
		{ 1, "{\"messages\": []}", HTTP_REQ_BAD, "'messages' must be a non-empty array" },
		{ 1, "{\"messages\": [{\"role\": \"user\"}]}", HTTP_REQ_BAD, "messages[0] needs a string 'role' and a string 'content'" },
		{ 0, "{\"prompt\": \"x\", \"prompt\": \"y\"}", HTTP_REQ_BAD_JSON, "duplicate" },
		{ 0, "{\"prompt\": \"x\", \"deterministic\": 1}", HTTP_REQ_BAD, "'deterministic' must be true or false" },
		{ 0, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"text\"}}", HTTP_REQ_BAD,
		  "'response_format' is not a parameter" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"xml\"}}",
		  HTTP_REQ_BAD, "type 'xml' is not one of" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\"}}",
		  HTTP_REQ_BAD, "needs 'json_schema'" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": 3}", HTTP_REQ_BAD,
		  "must be an object" },
		{ 1, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [], \"response_format\": "
		  "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {}}}}", HTTP_REQ_BAD, "'response_format' together with 'tools'" },
		{ 0, "{\"prompt\": \"x\", \"tools\": []}", HTTP_REQ_BAD, "'tools' is not a parameter" },
	};
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		struct http_req r;
		char why[256] = "";
		int k = parse(c[i].body, c[i].chat, &r, why);
		CHECKF(k == c[i].kind && strstr(why, c[i].says) && !strchr(why, '\n'), "%s: kind %d, \"%s\"", c[i].body, k, why);
		if (!k)
			http_req_free(&r);
	}
	/* a chat request to a model without a template ringlm formats */
	struct http_limits none = lim;
	none.has_chat = 0;
	struct http_req r;
	char why[256];
	const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
	CHECK(http_req_parse(b, strlen(b), 1, &none, &r, why, sizeof why) == HTTP_REQ_NO_TEMPLATE &&
	      strstr(why, "use /v1/completions"));
	/* a body cut short anywhere is refused, never read past */
	const char *full = "{\"prompt\": [1, 2, 3], \"max_tokens\": 5, \"stop\": [\"ab\"]}";
	for (size_t n = 0; n < strlen(full); n++) {
		char *cut = malloc(n + 1);
		memcpy(cut, full, n);
		int k = http_req_parse(cut, n, 0, &lim, &r, why, sizeof why);
		CHECKF(k == HTTP_REQ_BAD_JSON, "cut at %zu: kind %d", n, k);
		free(cut);
	}
}

int main(void)
{
	RUN(valid_bodies);
	RUN(bad_bodies_named);
	TEST_MAIN_END();
}
