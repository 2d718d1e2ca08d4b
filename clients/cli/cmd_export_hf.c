/* cmd_export_hf.c — `ringlm export-hf MODEL.gguf DIR`: the Hugging Face side of a GGUF model,
 * for frontends that tokenize and render chat templates from a model folder (NVIDIA Dynamo's,
 * transformers): DIR/tokenizer.json, tokenizer_config.json, config.json and
 * generation_config.json, written from what ringlm itself reads of the file (the plan's
 * config and chat family, the vocabulary blob through rl_tok / rl_bpe), so that `tokenizers`
 * gives ringlm's ids and apply_chat_template prefills what ringlm prefills.
 *
 *   byte-level BPE ("gpt2"): a BPE model with the file's vocabulary and merges, one Isolated
 *     Split per expression of the pre-tokenizer ringlm runs for tokenizer.ggml.pre (the spec
 *     the blob carries, from tokenizer/rl_pretok.c's table), then ByteLevel without its regex.
 *   SentencePiece ("llama"): a BPE model with byte_fallback whose merges are every split of a
 *     piece into two pieces, ranked by the merged piece's score (highest first), as Hugging
 *     Face's SentencePieceExtractor does; spaces normalized to U+2581 (and one prepended to a
 *     text where the vocabulary adds a dummy prefix).
 *   Both: control tokens (and end-of-generation texts) as special added tokens, user-defined
 *     ones as plain added tokens, so `encode(s)` equals ringlm's RL_TOK_SPECIAL encoding and,
 *     with the tokenizer's encode_special_tokens set, its plain one; BOS/EOS added by a
 *     TemplateProcessing post-processor exactly where ringlm adds them (RL_TOK_BOS). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clients/cli/cli.h"
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_chat.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"

#define ERR(...) do { fprintf(stderr, "ringlm export-hf: " __VA_ARGS__); fputc('\n', stderr); } while (0)

static void usage(FILE *f)
{
	fprintf(f, "usage: ringlm export-hf MODEL.gguf DIR\n"
		   "  writes DIR/tokenizer.json, tokenizer_config.json (with a chat_template that formats as\n"
		   "  ringlm does), config.json and generation_config.json from the GGUF file, for frontends\n"
		   "  that read a Hugging Face model folder (NVIDIA Dynamo, transformers). DIR is created if\n"
		   "  missing; files already there are replaced.\n");
}

/* ---- a string -> id map (open addressing) -------------------------------------------- */

struct smap { char **key; uint32_t *klen; int32_t *slot; uint32_t mask; };

static uint32_t fnv(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static int smap_init(struct smap *m, char **key, uint32_t *klen, uint32_t n)
{
	for (m->mask = 1; m->mask < 2 * n; m->mask <<= 1)
		;
	m->slot = malloc(m->mask * sizeof *m->slot);
	if (!m->slot)
		return -ENOMEM;
	memset(m->slot, 0xff, m->mask * sizeof *m->slot);
	m->mask--;
	m->key = key;
	m->klen = klen;
	return 0;
}

static int32_t *smap_at(struct smap *m, const char *s, size_t n)
{
	uint32_t h = fnv(s, n) & m->mask;
	while (m->slot[h] >= 0 && !(m->klen[m->slot[h]] == n && !memcmp(m->key[m->slot[h]], s, n)))
		h = (h + 1) & m->mask;
	return &m->slot[h];
}

static int32_t smap_get(struct smap *m, const char *s, size_t n)
{
	return *smap_at(m, s, n);
}

/* ---- JSON helpers --------------------------------------------------------------------- */

static json_t *jstr(const char *s, size_t n)
{
	json_t *v = json_stringn(s, n);
	return v ? v : json_null();    /* not UTF-8: cannot be written (the caller checks keys) */
}

static json_t *added_token(int32_t id, const char *s, size_t n, int special)
{
	return json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)id, "content", jstr(s, n),
			 "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", special);
}

/* post_processor: BOS and/or EOS around a text (TemplateProcessing), or none */
static json_t *template_processing(const char *bos, int32_t bos_id, const char *eos, int32_t eos_id)
{
	json_t *single = json_array(), *pair = json_array(), *st = json_object();
	for (int k = 0; k < 2; k++) {
		json_t *seq = k ? pair : single;
		if (bos) {
			json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", bos, "type_id", 0));
		}
		json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A", "type_id", 0));
		if (eos)
			json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", eos, "type_id", 0));
		if (k) {
			if (bos)
				json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", bos, "type_id", 1));
			json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "B", "type_id", 1));
			if (eos)
				json_array_append_new(seq, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", eos, "type_id", 1));
		}
	}
	if (bos)
		json_object_set_new(st, bos, json_pack("{s:s, s:[I], s:[s]}", "id", bos, "ids", (json_int_t)bos_id, "tokens", bos));
	if (eos)
		json_object_set_new(st, eos, json_pack("{s:s, s:[I], s:[s]}", "id", eos, "ids", (json_int_t)eos_id, "tokens", eos));
	return json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single, "pair", pair,
			 "special_tokens", st);
}

/* ---- the vocabulary ------------------------------------------------------------------- */

struct vocab {
	uint32_t n;
	char **key;                    /* [n] each token as tokenizer.json spells it (malloc'd) */
	uint32_t *klen;
	struct smap map;               /* key -> the id ringlm's lookup gives that text */
	uint32_t dup;                  /* ids whose text another id holds (left out of the map) */
};

static void vocab_free(struct vocab *v)
{
	for (uint32_t i = 0; v->key && i < v->n; i++)
		free(v->key[i]);
	free(v->key);
	free(v->klen);
	free(v->map.slot);
}

/* SentencePiece pieces come as the blob spells them (U+2581 as ' '): tokenizer.json spells
 * them with U+2581 again, except user-defined pieces, written with real spaces (matched in the
 * raw text as llama.cpp matches them). */
static int vocab_build(struct vocab *v, const struct rl_tok *t, int spm)
{
	v->n = rl_tok_vocab_size(t);
	v->key = calloc(v->n, sizeof *v->key);
	v->klen = calloc(v->n, sizeof *v->klen);
	if (!v->key || !v->klen || smap_init(&v->map, v->key, v->klen, v->n))
		return -ENOMEM;
	for (uint32_t i = 0; i < v->n; i++) {
		size_t n, k = 0;
		const char *s = rl_tok_text(t, (int32_t)i, &n);
		int esc = spm && rl_tok_type(t, (int32_t)i) != RL_TT_USER;
		char *o = malloc(3 * n + 1);
		if (!o)
			return -ENOMEM;
		for (size_t j = 0; j < n; j++) {
			if (esc && s[j] == ' ') {
				memcpy(o + k, "\xe2\x96\x81", 3);
				k += 3;
			} else {
				o[k++] = s[j];
			}
		}
		o[k] = 0;
		v->key[i] = o;
		v->klen[i] = (uint32_t)k;
	}
	/* which id a text maps to: the highest (SentencePiece's lookup; byte-level BPE's, as
	 * llama.cpp's token_to_id, the last) */
	for (uint32_t i = 0; i < v->n; i++) {
		int32_t *s = smap_at(&v->map, v->key[i], v->klen[i]);
		if (*s >= 0)
			v->dup++;
		*s = (int32_t)i;
	}
	return 0;
}

static json_t *vocab_json(const struct vocab *v, const char **bad)
{
	json_t *o = json_object();
	for (uint32_t i = 0; i < v->n && o; i++) {
		if (smap_get((struct smap *)&v->map, v->key[i], v->klen[i]) != (int32_t)i)
			continue;
		if (json_object_setn_new(o, v->key[i], v->klen[i], json_integer(i))) {
			*bad = v->key[i];
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

static json_t *added_tokens(const struct rl_tok *t, const struct vocab *v)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < v->n; i++) {
		int k = rl_tok_special_kind(t, (int32_t)i);
		if (k > 0)
			json_array_append_new(a, added_token((int32_t)i, v->key[i], v->klen[i], k == 2));
	}
	return a;
}

/* SentencePiece merges: every split of a piece into two pieces, the merged piece's score
 * deciding (highest first; a tie by the lower id, then the shorter left side). A piece that
 * ringlm's merge never makes (user-defined) makes none. */
struct merge { float score; int32_t id, l, r; uint32_t llen; };

static int merge_cmp(const void *a, const void *b)
{
	const struct merge *x = a, *y = b;
	if (x->score != y->score)
		return x->score < y->score ? 1 : -1;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return (x->llen > y->llen) - (x->llen < y->llen);
}

static json_t *spm_merges(const struct rl_tok *t, struct vocab *v, size_t *count)
{
	size_t n = 0, cap = 1 << 20;
	struct merge *m = malloc(cap * sizeof *m);
	if (!m)
		return NULL;
	for (uint32_t i = 0; i < v->n; i++) {
		int ty = rl_tok_type(t, (int32_t)i);
		if (ty == RL_TT_USER || smap_get(&v->map, v->key[i], v->klen[i]) != (int32_t)i)
			continue;
		float score;
		size_t pl;
		rl_tok_piece(t, (int32_t)i, &pl, &score);
		const char *s = v->key[i];
		for (uint32_t j = 1; j < v->klen[i]; j++) {
			if (((unsigned char)s[j] & 0xC0) == 0x80)
				continue;  /* inside a character */
			int32_t l = smap_get(&v->map, s, j), r = smap_get(&v->map, s + j, v->klen[i] - j);
			if (l < 0 || r < 0)
				continue;
			if (n == cap) {
				struct merge *nm = realloc(m, 2 * cap * sizeof *m);
				if (!nm) {
					free(m);
					return NULL;
				}
				m = nm;
				cap *= 2;
			}
			m[n++] = (struct merge){ score, (int32_t)i, l, r, j };
		}
	}
	qsort(m, n, sizeof *m, merge_cmp);
	json_t *a = json_array();
	for (size_t k = 0; k < n && a; k++)
		json_array_append_new(a, json_pack("[o, o]", jstr(v->key[m[k].l], v->klen[m[k].l]),
						   jstr(v->key[m[k].r], v->klen[m[k].r])));
	free(m);
	*count = n;
	return a;
}

/* Byte-level BPE merges as the blob has them, each pair once (its first rank, as ringlm keeps)
 * and only where both sides and the result are tokens (ringlm skips the others; Hugging Face
 * refuses them). */
static json_t *bpe_merges(const struct rl_bpe *b, struct vocab *v, size_t *count)
{
	uint32_t nm = rl_bpe_n_merges(b);
	char **seen = calloc(nm + 1, sizeof *seen);
	uint32_t *seen_len = calloc(nm + 1, sizeof *seen_len);
	struct smap pairs;
	json_t *a = json_array();
	char *cat = malloc(2 * 65536 + 2);
	size_t n = 0;
	if (!seen || !seen_len || !cat || !a || smap_init(&pairs, seen, seen_len, nm + 1)) {
		free(seen); free(seen_len); free(cat); json_decref(a);
		return NULL;
	}
	for (uint32_t i = 0; i < nm; i++) {
		size_t l;
		const char *m = rl_bpe_merge(b, i, &l), *sp = l > 1 ? memchr(m + 1, ' ', l - 1) : NULL;
		if (!sp || l > 2 * 65536)
			continue;  /* split as rl_bpe.c splits: at the first space after the first byte */
		size_t ll = (size_t)(sp - m), rl = l - ll - 1;
		memcpy(cat, m, ll);
		memcpy(cat + ll, sp + 1, rl);
		if (smap_get(&v->map, m, ll) < 0 || smap_get(&v->map, sp + 1, rl) < 0 || smap_get(&v->map, cat, ll + rl) < 0)
			continue;
		seen[i] = (char *)m;
		seen_len[i] = (uint32_t)l;
		int32_t *s = smap_at(&pairs, m, l);
		if (*s >= 0)
			continue;
		*s = (int32_t)i;
		json_array_append_new(a, json_pack("[o, o]", jstr(m, ll), jstr(sp + 1, rl)));
		n++;
	}
	free(pairs.slot); free(seen); free(seen_len); free(cat);
	*count = n;
	return a;
}

/* The pre-tokenizer ringlm runs (the blob's spec: "<mode><expr>\0" each) as Split steps. */
static json_t *bpe_pretokenizer(const struct rl_bpe *b, char *why, size_t whylen)
{
	size_t len;
	const char *s = rl_bpe_spec(b, &len), *e = s + len;
	json_t *steps = json_array();
	for (; s < e; s += strlen(s) + 1) {
		if (*s == 'D') {
			snprintf(why, whylen, "its pre-tokenizer cuts digit runs into groups of three with llama.cpp's "
				 "hand-written splitter, which tokenizers has no step for");
			json_decref(steps);
			return NULL;
		}
		json_array_append_new(steps, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
						       s + 1, "behavior", "Isolated", "invert", 0));
	}
	json_array_append_new(steps, json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
					       "trim_offsets", 1, "use_regex", 0));
	return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", steps);
}

static int write_json(const char *dir, const char *name, json_t *j, size_t flags, char *why, size_t whylen)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!j) {
		snprintf(why, whylen, "out of memory building %s", name);
		return -ENOMEM;
	}
	int rc = json_dump_file(j, path, flags);
	json_decref(j);
	if (rc) {
		snprintf(why, whylen, "cannot write %.300s: %s", path, strerror(errno ? errno : EIO));
		return -EIO;
	}
	return 0;
}

/* ---- the files ------------------------------------------------------------------------ */

static const char *tok_text(const struct vocab *v, uint32_t id)
{
	return id < v->n ? v->key[id] : NULL;
}

static json_t *tokenizer_json(const struct rl_tok *t, struct vocab *v, int adds_bos, int adds_eos,
			      uint32_t bos, uint32_t eos, char *why, size_t whylen, size_t *nmerges)
{
	const struct rl_bpe *b = rl_tok_bpe(t);
	const char *bad = NULL;
	json_t *vocab = vocab_json(v, &bad), *merges, *model, *norm = json_null(), *pre = json_null(), *dec, *post;
	if (!vocab) {
		snprintf(why, whylen, "token \"%.40s\" is not UTF-8, which tokenizer.json cannot hold", bad ? bad : "?");
		return NULL;
	}
	const char *bos_t = adds_bos ? tok_text(v, bos) : NULL, *eos_t = adds_eos ? tok_text(v, eos) : NULL;
	if (b) {
		uint32_t fl = rl_bpe_flags(b);
		if (fl & (RL_BPE_RAW | RL_BPE_ESCAPE_WS | RL_BPE_NL_WHOLE)) {
			snprintf(why, whylen, "its byte-level BPE merges UTF-8 characters with byte fallback (Gemma 4's), "
				 "which export-hf does not write yet");
			json_decref(vocab);
			return NULL;
		}
		if (!(pre = bpe_pretokenizer(b, why, whylen)) || !(merges = bpe_merges(b, v, nmerges))) {
			if (!pre)
				json_decref(vocab);
			else
				snprintf(why, whylen, "out of memory");
			json_decref(pre);
			return NULL;
		}
		model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
				  "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
				  "byte_fallback", 0, "ignore_merges", (fl & RL_BPE_IGNORE_MERGES) != 0, "vocab", vocab,
				  "merges", merges);
		dec = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1,
				"use_regex", 1);
		post = bos_t || eos_t ? template_processing(bos_t, (int32_t)bos, eos_t, (int32_t)eos)
				      : json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
						  "trim_offsets", 0, "use_regex", 0);
	} else {
		int prefix = !(rl_tok_spm_flags(t) & RL_SPM_NO_PREFIX);
		if (!(merges = spm_merges(t, v, nmerges))) {
			json_decref(vocab);
			snprintf(why, whylen, "out of memory");
			return NULL;
		}
		const char *unk = NULL;
		for (uint32_t i = 0; i < v->n && !unk; i++)
			if (rl_tok_type(t, (int32_t)i) == RL_TT_UNKNOWN)
				unk = v->key[i];
		json_t *rep = json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ", "content", "\xe2\x96\x81");
		norm = prefix ? json_pack("{s:s, s:[{s:s, s:s}, o]}", "type", "Sequence", "normalizers", "type", "Prepend",
					  "prepend", "\xe2\x96\x81", rep) : rep;
		model = json_pack("{s:s, s:n, s:s?, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
				  unk, "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 1, "byte_fallback", 1,
				  "ignore_merges", 0, "vocab", vocab, "merges", merges);
		json_t *steps = json_pack("[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]", "type", "Replace", "pattern", "String",
					  "\xe2\x96\x81", "content", " ", "type", "ByteFallback", "type", "Fuse");
		if (prefix)
			json_array_append_new(steps, json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip", "content", " ",
							       "start", 1, "stop", 0));
		dec = json_pack("{s:s, s:o}", "type", "Sequence", "decoders", steps);
		post = bos_t || eos_t ? template_processing(bos_t, (int32_t)bos, eos_t, (int32_t)eos) : json_null();
	}
	return json_pack("{s:s, s:n, s:n, s:o, s:o, s:o, s:o, s:o, s:o}", "version", "1.0", "truncation", "padding",
			 "added_tokens", added_tokens(t, v), "normalizer", norm, "pre_tokenizer", pre, "post_processor",
			 post, "decoder", dec, "model", model);
}

/* a float as its shortest decimal (1e-06, not 9.9999999747524271e-07) */
static json_t *jfloat(float f)
{
	char b[32];
	snprintf(b, sizeof b, "%.7g", (double)f);
	return json_real(strtod(b, NULL));
}

/* The Hugging Face names of the architectures ringlm reads from GGUF. */
static const struct { const char *gguf, *cls, *type; } archs[] = {
	{ "llama", "LlamaForCausalLM", "llama" }, { "mistral", "MistralForCausalLM", "mistral" },
	{ "qwen2", "Qwen2ForCausalLM", "qwen2" }, { "qwen3", "Qwen3ForCausalLM", "qwen3" },
	{ "qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe" }, { "phi3", "Phi3ForCausalLM", "phi3" },
	{ "gemma3", "Gemma3ForCausalLM", "gemma3_text" },
};

static json_t *config_json(const struct rl_model_plan *p)
{
	const struct rl_model_config *c = &p->cfg;
	const char *cls = "LlamaForCausalLM", *type = "llama";
	for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
		if (!strcmp(p->arch, archs[i].gguf)) {
			cls = archs[i].cls;
			type = archs[i].type;
		}
	if (!strcmp(type, "llama") && c->n_experts) {
		cls = "MixtralForCausalLM";
		type = "mixtral";
	}
	json_t *j = json_pack("{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:b, s:s}",
			      "architectures", cls, "model_type", type, "vocab_size", (json_int_t)c->vocab_size,
			      "hidden_size", (json_int_t)c->dim, "intermediate_size", (json_int_t)c->hidden_dim,
			      "num_hidden_layers", (json_int_t)c->n_layers, "num_attention_heads", (json_int_t)c->n_heads,
			      "num_key_value_heads", (json_int_t)c->n_kv_heads, "head_dim", (json_int_t)c->head_dim,
			      "max_position_embeddings", (json_int_t)c->max_ctx, "rope_theta", jfloat(c->rope_theta),
			      "rms_norm_eps", jfloat(c->norm_eps), "tie_word_embeddings", c->tied_embeddings,
			      "hidden_act", c->ffn_gelu ? "gelu_pytorch_tanh" : "silu");
	if (c->bos_id != UINT32_MAX)
		json_object_set_new(j, "bos_token_id", json_integer(c->bos_id));
	if (c->eos_id != UINT32_MAX)
		json_object_set_new(j, "eos_token_id", json_integer(c->eos_id));
	if (c->ffn_gelu)
		json_object_set_new(j, "hidden_activation", json_string("gelu_pytorch_tanh"));
	if (c->sliding_window)
		json_object_set_new(j, "sliding_window", json_integer(c->sliding_window));
	if (c->swa_period)
		json_object_set_new(j, "sliding_window_pattern", json_integer(c->swa_period));
	if (c->rope_theta_local > 0)
		json_object_set_new(j, "rope_local_base_freq", jfloat(c->rope_theta_local));
	if (c->n_experts) {
		json_object_set_new(j, !strcmp(type, "qwen3_moe") ? "num_experts" : "num_local_experts",
				    json_integer(c->n_experts));
		json_object_set_new(j, "num_experts_per_tok", json_integer(c->n_experts_used));
	}
	if (c->has_qkv_bias)
		json_object_set_new(j, "attention_bias", json_true());
	return j;
}

int rl_cmd_export_hf(int argc, char **argv)
{
	static const struct option lo[] = { { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	optind = 1;
	opterr = 0;
	int o;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (o == 'h') {
			usage(stdout);
			return 0;
		}
		ERR("unknown option '%s'; see ringlm export-hf --help", argv[optind - 1]);
		return 2;
	}
	if (argc - optind != 2) {
		ERR("give a GGUF model file and a folder: ringlm export-hf MODEL.gguf DIR");
		return 2;
	}
	const char *model = argv[optind], *dir = argv[optind + 1];
	char magic[4] = { 0 }, err[512];
	FILE *f = fopen(model, "rb");
	if (!f) {
		ERR("cannot open %s: %s; give a GGUF model file", model, strerror(errno));
		return 1;
	}
	size_t got = fread(magic, 1, 4, f);
	fclose(f);
	if (got != 4 || memcmp(magic, "GGUF", 4)) {
		ERR("%s is not a GGUF file; export-hf reads GGUF models (llama.cpp's format)", model);
		return 1;
	}
	struct stat st;
	if (mkdir(dir, 0755) && errno != EEXIST) {
		ERR("cannot create %s: %s; give a folder you can write", dir, strerror(errno));
		return 1;
	}
	if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK)) {
		ERR("cannot write into %s: %s; give a folder you can write", dir,
		    stat(dir, &st) ? strerror(errno) : !S_ISDIR(st.st_mode) ? "not a folder" : strerror(errno));
		return 1;
	}
	struct rl_model_plan p;
	if (rl_model_plan_open(model, NULL, &p, err, sizeof err)) {
		ERR("%s", err);
		return 1;
	}
	struct rl_tok *t = NULL;
	if (!p.vocab_blob) {
		ERR("%s has no vocabulary (tokenizer.ggml.tokens) to export", model);
		rl_model_plan_close(&p);
		return 1;
	}
	if (rl_tok_create(p.vocab_blob, p.vocab_blob_size, &t, err, sizeof err)) {
		ERR("%s", err);
		rl_model_plan_close(&p);
		return 1;
	}
	rl_tok_set_special(t, p.cfg.bos_id, p.cfg.eos_id);
	const struct rl_bpe *b = rl_tok_bpe(t);
	/* BOS / EOS where RL_TOK_BOS puts them (rl_tok_encode_ex: the completion path) */
	uint32_t bos = p.cfg.bos_id, eos = p.cfg.eos_id, n_vocab = rl_tok_vocab_size(t);
	int adds_bos = bos < n_vocab && (b ? rl_bpe_adds_bos(b) : !(rl_tok_spm_flags(t) & RL_SPM_NO_BOS));
	int adds_eos = eos < n_vocab && (b ? rl_bpe_adds_eos(b) : (rl_tok_spm_flags(t) & RL_SPM_ADD_EOS) != 0);
	struct vocab v = { 0 };
	int rc = 1;
	char why[512] = "";
	size_t nmerges = 0;
	uint32_t eog[64];
	size_t n_eog = rl_tok_eog_ids(t, eog, 64);
	n_eog = n_eog > 64 ? 64 : n_eog;
	enum rl_chat_family fam = rl_chat_from_name(p.chat_template);
	if (vocab_build(&v, t, b == NULL)) {
		ERR("out of memory reading the vocabulary");
		goto out;
	}
	if (write_json(dir, "tokenizer.json", tokenizer_json(t, &v, adds_bos, adds_eos, bos, eos, why, sizeof why, &nmerges),
		       JSON_COMPACT, why, sizeof why)) {
		ERR("%s: %s", model, why);
		goto out;
	}
	json_t *tc = json_pack("{s:b, s:b, s:I, s:s, s:b}", "add_bos_token", adds_bos, "add_eos_token", adds_eos,
			       "model_max_length", (json_int_t)p.cfg.max_ctx, "tokenizer_class", "PreTrainedTokenizerFast",
			       "clean_up_tokenization_spaces", 0);
	json_object_set_new(tc, "bos_token", bos < v.n ? jstr(v.key[bos], v.klen[bos]) : json_null());
	json_object_set_new(tc, "eos_token", eos < v.n ? jstr(v.key[eos], v.klen[eos]) : json_null());
	for (uint32_t i = 0; i < v.n; i++)
		if (rl_tok_type(t, (int32_t)i) == RL_TT_UNKNOWN) {
			json_object_set_new(tc, "unk_token", jstr(v.key[i], v.klen[i]));
			break;
		}
	if (fam != RL_CHAT_NONE) {
		long jl = rl_chat_jinja(fam, p.chat_system, NULL, 0);
		char *jt = jl > 0 ? malloc((size_t)jl + 1) : NULL;
		if (jt) {
			rl_chat_jinja(fam, p.chat_system, jt, (size_t)jl + 1);
			json_object_set_new(tc, "chat_template", json_string(jt));
		}
		free(jt);
	}
	if (write_json(dir, "tokenizer_config.json", tc, JSON_INDENT(2), why, sizeof why)) {
		ERR("%s", why);
		goto out;
	}
	if (write_json(dir, "config.json", config_json(&p), JSON_INDENT(2) | JSON_REAL_PRECISION(7), why, sizeof why)) {
		ERR("%s", why);
		goto out;
	}
	json_t *gc = json_pack("{s:o}", "eos_token_id", json_array());
	for (size_t i = 0; i < n_eog; i++)
		json_array_append_new(json_object_get(gc, "eos_token_id"), json_integer(eog[i]));
	if (bos != UINT32_MAX)
		json_object_set_new(gc, "bos_token_id", json_integer(bos));
	if (write_json(dir, "generation_config.json", gc, JSON_INDENT(2), why, sizeof why)) {
		ERR("%s", why);
		goto out;
	}
	printf("%s: %s vocabulary of %u tokens, %zu merges%s%s, chat template %s -> %s/{tokenizer,tokenizer_config,"
	       "config,generation_config}.json\n", model, b ? "byte-level BPE" : "SentencePiece", v.n, nmerges,
	       adds_bos ? ", BOS added" : "", adds_eos ? ", EOS added" : "", fam ? rl_chat_name(fam) : "none", dir);
	if (v.dup)
		printf("%u tokens share their text with a later one and are left out of the vocabulary map (ringlm never "
		       "produces them from text either)\n", v.dup);
	rc = 0;
out:
	vocab_free(&v);
	rl_tok_destroy(t);
	rl_model_plan_close(&p);
	return rc;
}
