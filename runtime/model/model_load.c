/* model_load.c — rl_model_plan_open and rl_model_load: pick the loader by what the file starts
 * with ("GGUF"; safetensors' 8-byte little-endian header length followed by '{'; a directory
 * is a Hugging Face checkpoint), falling back to llama2.c's headerless-magic .bin. Loading is
 * the plan read into fp32. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "runtime/model/model_internal.h"

int rl_model_plan_open(const char *path, const char *tokenizer_path, struct rl_model_plan *p,
		       char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	if (err && errlen)
		err[0] = 0;
	struct stat st;
	if (stat(path, &st) < 0) {
		int e = errno;
		/* the whole path: the user must see which folder is wrong */
		rl_model_err(err, errlen, path, "%s (give a .gguf, .safetensors or llama2.c .bin file, a Hugging Face "
			     "checkpoint folder, or synthetic:SHAPE)", strerror(e));
		return -e;
	}
	if (S_ISDIR(st.st_mode))
		return rl_model_plan_safetensors(path, tokenizer_path, p, err, errlen);
	size_t plen = strlen(path);
	struct rl_mfile f;
	int rc = rl_mfile_open(&f, path, err, errlen);
	if (rc)
		return rc;
	uint8_t head[9] = {0};
	size_t n = f.size < sizeof head ? f.size : sizeof head;
	rc = rl_mfile_pread(&f, head, n, 0, err, errlen);
	uint64_t size = f.size;
	rl_mfile_close(&f);
	if (rc)
		return rc;
	if (n >= 4 && !memcmp(head, "GGUF", 4))
		return rl_model_plan_gguf(path, tokenizer_path, p, err, errlen);
	if (n == 9 && head[8] == '{' && rl_rd64(head) <= size - 8)
		return rl_model_plan_safetensors(path, tokenizer_path, p, err, errlen);
	/* a name that promises a format the bytes do not have: say so, not "bad llama2.c header" */
	if (plen >= 5 && !strcmp(path + plen - 5, ".gguf")) {
		rl_model_err(err, errlen, path, "not a GGUF file: it does not start with \"GGUF\" (a truncated or failed "
			     "download? check its size and checksum)");
		return -EINVAL;
	}
	if (plen >= 12 && !strcmp(path + plen - 12, ".safetensors")) {
		rl_model_err(err, errlen, path, "not a safetensors file: no 8-byte header length followed by '{' (a "
			     "truncated or failed download?)");
		return -EINVAL;
	}
	if (size < RL_LLAMA2C_HDR_BYTES) {   /* smaller than a llama2.c header: no format could hold a model */
		rl_model_err(err, errlen, path, "not a model file ringlm reads: %llu bytes (a failed download?)",
			     (unsigned long long)size);
		return -EINVAL;
	}
	rc = rl_model_plan_llama2c(path, tokenizer_path, p, err, errlen);
	if (rc == -EINVAL && err && strstr(err, "bad llama2.c header")) {
		char inner[256];
		snprintf(inner, sizeof inner, "%s", err);
		rl_model_err(err, errlen, path, "not a model file ringlm reads: not GGUF, not safetensors, and as a "
			     "llama2.c checkpoint its header is wrong (%s)", strchr(inner, '(') ? strchr(inner, '(') + 1 : inner);
		size_t k = strlen(err);
		if (k && err[k - 1] == ')' && k >= 2 && err[k - 2] == ')')
			err[k - 1] = 0;
	}
	return rc;
}

int rl_model_load(const char *path, const char *tokenizer_path, struct rl_model **out,
		  char *err, size_t errlen)
{
	*out = NULL;
	return rl_model_load_planned(rl_model_plan_open, path, tokenizer_path, out, err, errlen);
}
