/* fuzz_llama2c.c — libFuzzer harness for the llama2.c .bin loader: the input is the file.
 * Tests: runtime/model (llama2.c).
 */
#include "tests/fuzz/fuzz_common.h"
#include "runtime/model/model_internal.h"
#include "runtime/model/rl_model_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("model.bin", data, size);
	struct rl_model *m = NULL;
	char err[512];
	if (rl_model_load_llama2c(path, NULL, &m, err, sizeof err) == 0)
		rl_model_destroy(m);
	else
		FUZZ_ASSERT(memchr(err, 0, sizeof err) && err[0]);
	return 0;
}
