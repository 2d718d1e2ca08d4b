/* model_load.c — rl_model_plan_open and rl_model_load: pick the loader by what the file starts
 * with ("GGUF"; safetensors' 8-byte little-endian header length followed by '{'; a directory
 * is a Hugging Face checkpoint), falling back to llama2.c's headerless-magic .bin. Loading is
 * the plan read into fp32. */
#include <errno.h>
#include <stdio.h>
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
		rl_model_err(err, errlen, rl_model_basename(path), "%s", strerror(e));
		return -e;
	}
	if (S_ISDIR(st.st_mode))
		return rl_model_plan_safetensors(path, tokenizer_path, p, err, errlen);
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
	return rl_model_plan_llama2c(path, tokenizer_path, p, err, errlen);
}

int rl_model_load(const char *path, const char *tokenizer_path, struct rl_model **out,
		  char *err, size_t errlen)
{
	*out = NULL;
	return rl_model_load_planned(rl_model_plan_open, path, tokenizer_path, out, err, errlen);
}
