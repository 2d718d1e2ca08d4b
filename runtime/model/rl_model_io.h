/* rl_model_io.h — the model module's API: models in and out of files. Shapes by name,
 * allocation, random fill, loading any supported file (GGUF, safetensors + config.json,
 * llama2.c .bin) into fp32, the GGUF writer, and vocabularies. The struct it fills is the
 * kernels' data contract, kernels/rl_model.h; streaming a file without an fp32 copy is
 * rl_model_plan.h. Sources: runtime/model/model*.c. */
#ifndef RL_MODEL_IO_H
#define RL_MODEL_IO_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/rl_model.h"

/* On-disk element types of weights (what a plan reads, what the writer writes). */
enum rl_dt { RL_DT_F32, RL_DT_F16, RL_DT_BF16, RL_DT_Q8_0 };

/* Weights (floats) a model of this shape holds. */
uint64_t rl_model_weight_elems(const struct rl_model_config *cfg);
/* Checks, before anything is allocated, that file_bytes of weight data can hold a model of
 * this shape at all (so a small corrupt header cannot make a loader allocate gigabytes).
 * 0, or -EINVAL with a one-line reason naming name. */
int  rl_model_weights_fit(const struct rl_model_config *cfg, uint64_t file_bytes, const char *name,
			  char *err, size_t errlen);
/* Allocates one zeroed block for every weight of cfg and points the fields into it
 * (wcls = tok_emb when cfg->tied_embeddings; biases only when has_qkv_bias). Checks the
 * shape for sanity and overflow: -EINVAL with a reason in err. */
int  rl_model_alloc(const struct rl_model_config *cfg, struct rl_model **out, char *err, size_t errlen);
void rl_model_destroy(struct rl_model *m);
/* The config of a named shape (tiny = stories260K, 110m, 1b, llama3-8b; head_dim = dim/heads,
 * rope_scale 1, norm_eps 1e-5, bos 1, eos 2). 0, or -ENOENT for an unknown name. */
int  rl_model_shape(const char *name, struct rl_model_config *cfg);
/* Fills every weight with deterministic random values (norms near 1, projections scaled by
 * 1/sqrt(fan_in)), for tests and benchmarks at real shapes. */
void rl_model_fill_random(struct rl_model *m, uint64_t seed);
/* Loads any supported format (by magic: GGUF, safetensors directory/file + config.json,
 * llama2.c .bin). tokenizer_path (llama2.c tokenizer.bin) is optional where the file has a
 * vocabulary. On failure: -errno and one line naming the file and what is wrong in err. */
int  rl_model_load(const char *path, const char *tokenizer_path, struct rl_model **out,
		   char *err, size_t errlen);
/* The vocabulary of a GGUF file (tokenizer.ggml.tokens/scores, SentencePiece "llama" model)
 * as a llama2.c tokenizer.bin blob (malloc'd; BOS/EOS pieces wrapped in newlines as llama2.c
 * does), without loading the weights. -ENOENT when the file has none. */
int  rl_gguf_read_vocab(const char *path, void **blob, uint32_t *size, char *err, size_t errlen);
/* Reads a llama2.c tokenizer.bin into m->vocab_blob after checking it has exactly
 * m->cfg.vocab_size tokens (-EINVAL and a one-line reason otherwise). */
int  rl_model_load_tokenizer(struct rl_model *m, const char *path, char *err, size_t errlen);
/* A synthetic SentencePiece-style vocabulary of n (259..~550k) pieces in tokenizer.bin layout
 * (malloc'd): <unk>, BOS 1, EOS 2, byte pieces 3..258, then printable pieces with scores. */
int  rl_model_synth_vocab(uint32_t n, void **blob, uint32_t *size);
/* 0 when the file system holding path has bytes free (or cannot say); -ENOSPC and a line
 * naming path, the size and the free space otherwise. */
int  rl_model_check_space(const char *path, uint64_t bytes, char *err, size_t errlen);
/* Writes m as a standard GGUF v3 "llama" file: 2-D weights as wtype (Q8_0 where rows are
 * whole 32-weight blocks, else F16), norms and biases f32, tensors aligned to 32, the
 * vocabulary (if any) as tokenizer.ggml.*. Q/K rows are permuted to adjacent-pair RoPE when
 * m uses rope_halves. Checks the file system has room first (rl_model_check_space). */
int  rl_gguf_write(const struct rl_model *m, const char *path, enum rl_dt wtype,
		   char *err, size_t errlen);

#endif
