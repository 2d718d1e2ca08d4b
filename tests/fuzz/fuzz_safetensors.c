/* fuzz_safetensors.c — libFuzzer harness for the safetensors loader: the input is
 * model.safetensors; config.json beside it is fixed (a 1-layer dim-8 model, matching the
 * seeds tests/fuzz/make_seeds.py writes), so the fuzzer spends its time on the header JSON
 * and the tensor table. One that loads must also stream to the same weights (fuzz_stream.h).
 * Tests: runtime/model (safetensors, jansson).
 */
#include "tests/fuzz/fuzz_stream.h"
#include "runtime/model/rl_model_io.h"

static const char config[] =
	"{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1,"
	" \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"vocab_size\": 16,"
	" \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int have_config;
	if (!have_config) {
		fuzz_file("config.json", (const uint8_t *)config, sizeof config - 1);
		have_config = 1;
	}
	const char *path = fuzz_file("model.safetensors", data, size);
	struct rl_model *m = NULL;
	char err[512];
	if (rl_model_load_safetensors(path, NULL, &m, err, sizeof err) == 0) {
		fuzz_stream_matches(rl_model_plan_safetensors, path, m);
		rl_model_destroy(m);
	} else {
		FUZZ_ASSERT(memchr(err, 0, sizeof err) && err[0]);
	}
	return 0;
}
