/* fuzz_gguf.c — libFuzzer harness for the GGUF loader: the input is the whole file; one that
 * loads must also stream to the same weights (fuzz_stream.h).
 * Tests: runtime/model (GGUF).
 */
#include "tests/fuzz/fuzz_stream.h"
#include "runtime/model/rl_model_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("model.gguf", data, size);
	struct rl_model *m = NULL;
	char err[512];
	if (rl_model_load_gguf(path, NULL, &m, err, sizeof err) == 0) {
		fuzz_stream_matches(rl_model_plan_gguf, path, m);
		rl_model_destroy(m);
	} else {
		FUZZ_ASSERT(memchr(err, 0, sizeof err) && err[0]);
	}
	return 0;
}
