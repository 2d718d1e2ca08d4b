/* fuzz_http_req.c — libFuzzer harness for ringlm-http's request parsing and validation
 * (http_req_parse), the first half of the one path from a body to prompt ids that the
 * generation and render endpoints share. The other half (chat template, tools' formatter,
 * tokenizer) runs on a live client's vocabulary, so it is left to the HTTP tests. Input: a
 * byte of endpoint and limits, then the body. Properties: the result is one of the enum's;
 * an accepted request fits every limit and has exactly one prompt form; a refusal says why
 * (a terminated, non-empty message); nothing leaks (ASan).
 * Tests: clients/http (http_req).
 */
#include <math.h>
#include "tests/fuzz/fuzz_common.h"
#include "clients/http/http_req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const int chat = data[0] & 1;
	const struct http_limits lim = { .max_new = 16 + (data[0] >> 1 & 7) * 100, .vocab_size = 2 + (data[0] >> 4) * 5000,
					 .max_prompt = 1 + (data[0] >> 4) * 64, .has_chat = !(data[0] & 2),
					 .chat_name = "chatml" };
	struct http_req r;
	char why[256];
	memset(why, 'x', sizeof why);
	int rc = http_req_parse((const char *)data + 1, size - 1, chat, &lim, &r, why, sizeof why);
	FUZZ_ASSERT(rc == HTTP_REQ_OK || rc == HTTP_REQ_BAD_JSON || rc == HTTP_REQ_BAD || rc == HTTP_REQ_NO_TEMPLATE);
	if (rc) {
		FUZZ_ASSERT(memchr(why, 0, sizeof why) && why[0]);
		FUZZ_ASSERT(rc != HTTP_REQ_NO_TEMPLATE || (chat && !lim.has_chat));
		return 0;
	}
	FUZZ_ASSERT(r.chat == chat && (!chat || lim.has_chat));
	FUZZ_ASSERT(r.max_tokens <= lim.max_new && (r.max_tokens >= 1 || r.echo));
	FUZZ_ASSERT(r.n >= 1 && r.n <= HTTP_MAX_N && r.n_stops >= 0 && r.n_stops <= HTTP_MAX_STOPS);
	for (int i = 0; i < r.n_stops; i++)
		FUZZ_ASSERT(r.stops[i][0] && strlen(r.stops[i]) <= HTTP_MAX_STOP_LEN);
	FUZZ_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 && r.top_p <= 1 && r.top_k <= lim.vocab_size);
	FUZZ_ASSERT(r.lp_top >= 0 && r.lp_top <= RINGLM_MAX_TOP_LOGPROBS && (r.lp_on || !r.lp_top || !chat));
	if (chat) {                /* messages (template) or the whole body (tools), never text or ids */
		FUZZ_ASSERT(!r.text && !r.ids && (r.tools ? !r.msgs : r.msgs && r.n_msgs >= 1));
		for (size_t i = 0; !r.tools && i < r.n_msgs; i++)
			FUZZ_ASSERT(r.msgs[i].role && r.msgs[i].content);
		FUZZ_ASSERT(!(r.tools && r.schema));
	} else {                   /* text, or ids below the vocabulary's size */
		FUZZ_ASSERT(!r.msgs && !r.tools && !!r.text != !!r.ids);
		FUZZ_ASSERT(!r.ids || (r.n_ids >= 1 && (uint32_t)r.n_ids <= lim.max_prompt));
		for (int i = 0; r.ids && i < r.n_ids; i++)
			FUZZ_ASSERT(r.ids[i] < lim.vocab_size);
	}
	http_req_free(&r);
	return 0;
}
