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

/* On-disk element types of weights: enum rl_dt (kernels/rl_model.h, since the cpu kernels
 * compute on them); runtime/model/model_dtype.c owns the table (names, GGML ids, block
 * geometry, decoders). */

struct rl_dt_info {
	const char *name;              /* as llama.cpp prints it: "Q4_K" */
	uint32_t ggml;                 /* GGML type id in GGUF tensor infos */
	uint16_t blk_elems, blk_bytes; /* a block: weights, bytes (1 and 4/2 for floats) */
	uint8_t  n_f16, f16_off[2];    /* the block's f16 scale fields (byte offsets) */
	void   (*decode)(float *y, const uint8_t *blk);   /* one block to fp32; NULL for floats */
};
/* NULL for a value outside enum rl_dt. */
const struct rl_dt_info *rl_dt_info(int dt);
/* enum rl_dt of a GGML type id, or -1 when ringlm does not read that type. */
int  rl_dt_of_ggml(uint32_t ggml_type);
int  rl_ggml_of_dt(int dt);
/* Case-insensitive name ("q4_k") to enum rl_dt, or -1. */
int  rl_dt_from_name(const char *name);
/* "F32, F16, ..., IQ4_XS": the supported names, for messages. */
void rl_dt_names(char *out, size_t len);
/* The name of any GGML type id, including ones ringlm does not read ("IQ2_XXS"). */
const char *rl_ggml_type_name(uint32_t ggml_type);
/* Decodes nblocks whole blocks of a block type into y (nblocks * blk_elems floats),
 * exactly as ggml's dequantize_row_*. -EINVAL for a float type. */
int  rl_dt_decode(int dt, float *y, const void *src, uint64_t nblocks);
/* Fills one block of a block type with seeded random bits whose f16 scales make the largest
 * |weight| between amax/2 and amax: random weights at real shapes for the writer (types it
 * has no quantizer for) and the tests. *state is the generator's state (nonzero). */
int  rl_dt_random_block(int dt, uint8_t *blk, uint64_t *state, float amax);
/* Quantizes nblocks whole blocks of x into dt's bytes at out, for the types with a
 * quantizer, as ggml's reference quantizers (quantize_row_*_ref) compute them: Q8_0
 * (d = max|x| / 127, q = round(x / d)) and Q4_K (per 32 weights a fitted scale and min,
 * stored as 6-bit multiples of the block's f16 pair). -ENOTSUP for the others
 * (rl_dt_random_block fills those). */
int  rl_dt_quantize(int dt, void *out, const float *x, uint64_t nblocks);
/* w = rows x cols weights of type dt at data (cols whole blocks of dt): geometry and decoder
 * from the table. */
void rl_wmat_init(struct rl_wmat *w, const void *data, int dt, uint32_t rows, uint32_t cols);
/* The fewest bytes any supported type spends per weight (Q2_K's 84/256). */
double rl_dt_min_bytes_per_weight(void);

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
/* A SentencePiece vocabulary blob without the dummy prefix (Gemma's): appends the trailer
 * that says so (tokenizer/rl_tok.h) unless there; byte-level BPE blobs are left alone. 0 or
 * -ENOMEM. prefixless: whether a blob carries it. */
int  rl_model_vocab_no_prefix(void **blob, uint32_t *size);
int  rl_model_vocab_prefixless(const void *blob, uint32_t size);
/* Makes cfg (dim set) a Gemma 3: q/k norms, HF rotation, post-norms, GELU, embeddings times
 * sqrt(dim), and the layer pattern and local RoPE base files leave unsaid (every sixth layer
 * global, local base 10000); the window is the caller's. */
void rl_model_gemma3(struct rl_model_config *cfg);
/* Fills every weight with deterministic random values (norms near 1, projections scaled by
 * 1/sqrt(fan_in)), for tests and benchmarks at real shapes. */
void rl_model_fill_random(struct rl_model *m, uint64_t seed);
/* Sets cfg's RoPE factors to Llama 3's rope scaling (rope_scaling "llama3" in config.json:
 * factor, low_freq_factor, high_freq_factor, original_max_position_embeddings), computed as
 * Hugging Face's _compute_llama3_parameters and llama.cpp's converter do: pairs whose
 * wavelength is below orig/high keep their frequency, those above orig/low are divided by
 * factor, the ones between are blended. Uses cfg's rope_theta and head_dim. 0, -EINVAL for
 * factors out of range, -ENOTSUP when head_dim / 2 > RL_ROPE_MAX_FREQS. */
int  rl_rope_llama3_freqs(struct rl_model_config *cfg, float factor, float low_freq_factor,
			  float high_freq_factor, float original_max_ctx);
/* LongRoPE's attention factor for a model trained to max_ctx from orig_ctx, as Phi-3's (HF
 * and llama.cpp's converter): sqrt(1 + ln(max / orig) / ln(orig)), 1 when not longer. */
double rl_longrope_attn_factor(uint32_t max_ctx, uint32_t orig_ctx);
/* Synthetic LongRoPE for test models (`mkmodel --rope-scaling longrope`): short and long
 * factor sets shaped like Phi-3-128k's, the short ones serving up to orig_ctx (< max_ctx),
 * and the attention factor. 0, -EINVAL for orig_ctx out of range, -ENOTSUP for head_dim / 2
 * > RL_ROPE_MAX_FREQS. */
int  rl_rope_longrope_synth(struct rl_model_config *cfg, uint32_t orig_ctx);
/* As rl_model_load, but every matrix stays as the file stores it (F16, BF16, Q8_0, Q4_K ...:
 * the rl_wmat fields of kernels/rl_model.h; the fp32 matrix pointers are NULL except for F32
 * ones); norms and biases are fp32. One block of memory about the size of the file's weights.
 * What the cpu backend runs on. */
int  rl_model_load_stored(const char *path, const char *tokenizer_path, struct rl_model **out,
			  char *err, size_t errlen);
/* Loads any supported format (by magic: GGUF, safetensors directory/file + config.json,
 * llama2.c .bin). tokenizer_path (llama2.c tokenizer.bin) is optional where the file has a
 * vocabulary. On failure: -errno and one line naming the file and what is wrong in err. */
int  rl_model_load(const char *path, const char *tokenizer_path, struct rl_model **out,
		   char *err, size_t errlen);
/* The vocabulary of a GGUF file (tokenizer.ggml.tokens/scores, SentencePiece "llama" model)
 * as a llama2.c tokenizer.bin blob (malloc'd; BOS/EOS pieces wrapped in newlines as llama2.c
 * does), without loading the weights. -ENOENT when the file has none. */
int  rl_gguf_read_vocab(const char *path, void **blob, uint32_t *size, char *err, size_t errlen);
/* A Hugging Face tokenizer.json (byte-level BPE) as the tokenizer/rl_bpe.h blob
 * (model_hf_tokenizer.c). n_vocab 0 takes the vocabulary size from the file. 0; -ENOTSUP when
 * it is another kind of tokenizer; -EINVAL/-ENOMEM with one line in err. */
int  rl_hf_tokenizer_blob(const char *path, uint32_t n_vocab, uint32_t bos, uint32_t eos,
			  void **blob, uint32_t *size, char *err, size_t errlen);
/* Reads a llama2.c tokenizer.bin into m->vocab_blob after checking it has exactly
 * m->cfg.vocab_size tokens (-EINVAL and a one-line reason otherwise). */
int  rl_model_load_tokenizer(struct rl_model *m, const char *path, char *err, size_t errlen);
/* A synthetic SentencePiece-style vocabulary of n (259..~550k) pieces in tokenizer.bin layout
 * (malloc'd): <unk>, BOS 1, EOS 2, byte pieces 3..258, then printable pieces with scores. */
int  rl_model_synth_vocab(uint32_t n, void **blob, uint32_t *size);
/* 0 when the file system holding path has bytes free (or cannot say); -ENOSPC and a line
 * naming path, the size and the free space otherwise. */
int  rl_model_check_space(const char *path, uint64_t bytes, char *err, size_t errlen);
/* Writes m as a standard GGUF v3 "llama" file: 2-D weights as wtype (a block type only where
 * rows are whole blocks, else F16), norms and biases f32, tensors aligned to 32, the
 * vocabulary (if any) as tokenizer.ggml.*. F32/F16/BF16/Q8_0/Q4_K hold m's weights (the block
 * types rounded by rl_dt_quantize: a 4-bit draft of the same weights for speculative decoding);
 * the other block types hold seeded random blocks with about m's weight magnitudes, not m's
 * weights (ringlm has no quantizer for them: real checkpoints come from llama.cpp's
 * llama-quantize). Q/K rows are permuted to adjacent-pair RoPE when
 * m uses rope_halves. Checks the file system has room first (rl_model_check_space). */
int  rl_gguf_write(const struct rl_model *m, const char *path, enum rl_dt wtype,
		   char *err, size_t errlen);

#endif
