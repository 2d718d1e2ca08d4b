/* model_internal.h — plumbing shared by the model loaders and the GGUF writer (not a public
 * header): an opened model file, batched io_uring reads of tensors into fp32 destinations
 * with dtype conversion, half-precision conversions, one-line error formatting, and the
 * check of a llama2.c-layout vocabulary blob. */
#ifndef RL_MODEL_INTERNAL_H
#define RL_MODEL_INTERNAL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rl_model.h"

/* On-disk element types a loader can hand to rl_model_read_tensors. */
enum rl_dt { RL_DT_F32, RL_DT_F16, RL_DT_BF16, RL_DT_Q8_0 };

struct rl_mfile {
	int         fd;
	uint64_t    size;
	const char *name;              /* basename of the path, for error messages */
};

/* One tensor to read: nbytes at file offset off, stored as dtype, converted into nelem
 * floats at dst. */
struct rl_tread {
	uint64_t off, nbytes, nelem;
	int      dtype;
	float   *dst;
};

__attribute__((format(printf, 4, 5)))
void rl_model_err(char *err, size_t errlen, const char *name, const char *fmt, ...);
const char *rl_model_basename(const char *path);

int  rl_mfile_open(struct rl_mfile *f, const char *path, char *err, size_t errlen);
void rl_mfile_close(struct rl_mfile *f);
/* Reads exactly len bytes at off; a file that ends early is -EINVAL ("truncated"). */
int  rl_mfile_pread(const struct rl_mfile *f, void *buf, size_t len, uint64_t off,
		    char *err, size_t errlen);
/* Bytes that nelem elements of dtype occupy on disk; -EINVAL when nelem does not fit the
 * dtype's block size or the product overflows. */
int  rl_dt_size(int dtype, uint64_t nelem, uint64_t *nbytes);
/* Reads every tensor (bounds already checked by the caller) with several large reads in
 * flight on an io_uring, converting non-f32 data through a bounded staging buffer. */
int  rl_model_read_tensors(const struct rl_mfile *f, const struct rl_tread *t, size_t n,
			   char *err, size_t errlen);

float    rl_f16_to_f32(uint16_t h);
float    rl_bf16_to_f32(uint16_t h);
uint16_t rl_f32_to_f16(float f);
uint16_t rl_f32_to_bf16(float f);

/* Checks a llama2.c tokenizer.bin blob: sane max_token_length, exactly n_vocab entries with
 * lengths within it and non-NaN scores, nothing after. */
int  rl_model_vocab_check(const void *blob, size_t size, uint32_t n_vocab, const char *name,
			  char *err, size_t errlen);

int rl_model_load_llama2c(const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen);
int rl_model_load_gguf(const char *path, const char *tokenizer_path, struct rl_model **out,
		       char *err, size_t errlen);
int rl_model_load_safetensors(const char *path, const char *tokenizer_path, struct rl_model **out,
			      char *err, size_t errlen);

static inline uint32_t rl_rd32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rl_rd64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
#endif
