/* rl_model.h — a loaded Llama-family decoder: config, fp32 weights, tokenizer vocabulary.
 *
 * Every loader (GGUF, safetensors + config.json, llama2.c .bin) produces this one struct, with
 * weights converted to fp32 row-major [out][in] (y = W x, as in llama2.c). Backends that want
 * other dtypes (cuda: bf16) convert from here. RoPE pairing is a config field because the
 * formats differ: llama2.c and GGUF "llama" rotate adjacent pairs (2i, 2i+1), Hugging Face
 * safetensors rotate halves (i, i + head_dim/2).
 */
#ifndef RL_MODEL_H
#define RL_MODEL_H
#include <stdint.h>
#include <stddef.h>

struct rl_model_config {
	uint32_t dim;                  /* model width */
	uint32_t hidden_dim;           /* SwiGLU inner width */
	uint32_t n_layers;
	uint32_t n_heads;              /* query heads */
	uint32_t n_kv_heads;           /* key/value heads (GQA: n_heads % n_kv_heads == 0) */
	uint32_t head_dim;             /* dim / n_heads unless the file says otherwise */
	uint32_t vocab_size;
	uint32_t max_ctx;              /* trained context length */
	float    rope_theta;           /* 10000 for Llama 2, 500000 for Llama 3 */
	float    rope_scale;           /* linear position scaling factor, 1 = none */
	float    norm_eps;             /* RMSNorm epsilon */
	int      rope_halves;          /* 1: rotate (i, i+hd/2) (HF); 0: adjacent pairs */
	int      tied_embeddings;      /* classifier shares tok_emb */
	int      has_qkv_bias;         /* Qwen2-style biases on q/k/v */
	uint32_t bos_id, eos_id;       /* UINT32_MAX when none */
};

struct rl_layer {
	float *attn_norm;              /* [dim] */
	float *wq;                     /* [n_heads*head_dim, dim] */
	float *wk;                     /* [n_kv_heads*head_dim, dim] */
	float *wv;                     /* [n_kv_heads*head_dim, dim] */
	float *bq, *bk, *bv;           /* biases or NULL */
	float *wo;                     /* [dim, n_heads*head_dim] */
	float *ffn_norm;               /* [dim] */
	float *w_gate;                 /* [hidden_dim, dim]  (llama2.c w1) */
	float *w_down;                 /* [dim, hidden_dim]  (llama2.c w2) */
	float *w_up;                   /* [hidden_dim, dim]  (llama2.c w3) */
};

struct rl_model {
	struct rl_model_config cfg;
	char   name[64];
	float *tok_emb;                /* [vocab_size, dim] */
	struct rl_layer *layers;       /* [n_layers] */
	float *out_norm;               /* [dim] */
	float *wcls;                   /* [vocab_size, dim]; == tok_emb when tied */
	/* Tokenizer vocabulary in llama2.c tokenizer.bin layout (int32 max_token_length, then per
	 * token: float score, int32 len, len bytes), or NULL when the model file has none. */
	void    *vocab_blob;
	uint32_t vocab_blob_size;
	void    *mem;                  /* owned storage for all of the above */
	size_t   mem_size;
};


/* Allocates one zeroed block for every weight of cfg and points the fields into it
 * (wcls = tok_emb when cfg->tied_embeddings; biases only when has_qkv_bias). Checks the
 * shape for sanity and overflow: -EINVAL with a reason in err. */
/* Weights (floats) a model of this shape holds. */
uint64_t rl_model_weight_elems(const struct rl_model_config *cfg);
/* Checks, before anything is allocated, that file_bytes of weight data can hold a model of
 * this shape at all (so a small corrupt header cannot make a loader allocate gigabytes).
 * 0, or -EINVAL with a one-line reason naming name. */
int  rl_model_weights_fit(const struct rl_model_config *cfg, uint64_t file_bytes, const char *name,
			  char *err, size_t errlen);
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
/* Writes m as a standard GGUF v3 "llama" file: 2-D weights as dtype (0 f32, 1 f16, 2 bf16,
 * 3 q8_0 where rows are whole 32-weight blocks, else f16), norms and biases f32, tensors aligned to 32, the vocabulary (if any) as tokenizer.ggml.*.
 * Q/K rows are permuted to adjacent-pair RoPE when m uses rope_halves. */
int  rl_gguf_write(const struct rl_model *m, const char *path, int dtype, char *err, size_t errlen);

#endif
