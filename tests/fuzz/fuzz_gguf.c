/* fuzz_gguf.c — libFuzzer harness for the GGUF loader: the input is the whole file. */
#include "fuzz_common.h"
#include "model_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("model.gguf", data, size);
	struct rl_model *m = NULL;
	char err[512];
	if (rl_model_load_gguf(path, NULL, &m, err, sizeof err) == 0)
		rl_model_destroy(m);
	else
		FUZZ_ASSERT(memchr(err, 0, sizeof err) && err[0]);
	return 0;
}
