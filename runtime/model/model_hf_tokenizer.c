/* model_hf_tokenizer.c — a Hugging Face tokenizer.json (byte-level BPE: Llama 3, Qwen2,
 * GPT-2) read into the rl_bpe.h vocabulary blob, so a safetensors folder serves text like the
 * same model's GGUF. Parsed with jansson; the pre-tokenizer's expressions are taken from the
 * file itself (its Split and Digits steps, GPT-2's regex for a ByteLevel one that splits),
 * run as Hugging Face runs them (rl_pretok.h's 'U' mode). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_pretok.h"
#include "runtime/model/model_internal.h"

/* The pre-tokenizer's split expressions in the order the steps apply them (a Sequence in
 * order; Split: its regex; Digits: each digit, or digit runs; ByteLevel with use_regex:
 * GPT-2's); *byte_level says whether a ByteLevel step is present at all. A step that splits
 * some other way is refused by name in *bad. At most cap expressions. */
static size_t find_exprs(json_t *pt, const char **ex, size_t n, size_t cap, int *byte_level, const char **bad)
{
	const char *type = json_string_value(json_object_get(pt, "type"));
	if (!type)
		return n;
	if (!strcmp(type, "Sequence")) {
		size_t i;
		json_t *x;
		json_array_foreach(json_object_get(pt, "pretokenizers"), i, x)
			n = find_exprs(x, ex, n, cap, byte_level, bad);
		return n;
	}
	const char *e = NULL;
	if (!strcmp(type, "Split")) {
		const char *beh = json_string_value(json_object_get(pt, "behavior"));
		e = json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
		if (!e || (beh && strcmp(beh, "Isolated")) || json_is_true(json_object_get(pt, "invert")))
			*bad = "a Split that is not an Isolated regex";
	} else if (!strcmp(type, "Digits")) {
		e = json_is_true(json_object_get(pt, "individual_digits")) ? "\\p{N}" : "\\p{N}+";
	} else if (!strcmp(type, "ByteLevel")) {
		*byte_level = 1;
		json_t *ur = json_object_get(pt, "use_regex");
		if (!ur || json_is_true(ur))
			e = RL_PRETOK_HF_GPT2;
	} else {
		*bad = type;
	}
	if (e && n < cap)
		ex[n++] = e;
	return n;
}

/* 1 when the post-processor puts a special token before the text (Llama 3's
 * TemplateProcessing "<|begin_of_text|> $A", alone or in a Sequence): the vocabulary adds BOS.
 * Qwen2's (ByteLevel only) adds none. */
static int template_adds_bos(const json_t *pp)
{
	const char *ty = json_string_value(json_object_get(pp, "type"));
	if (!ty)
		return 0;
	if (!strcmp(ty, "Sequence")) {
		size_t i;
		json_t *v;
		json_array_foreach(json_object_get(pp, "processors"), i, v)
			if (template_adds_bos(v))
				return 1;
		return 0;
	}
	return !strcmp(ty, "TemplateProcessing") &&
	       json_object_get(json_array_get(json_object_get(pp, "single"), 0), "SpecialToken") != NULL;
}

int rl_hf_tokenizer_blob(const char *path, uint32_t n_vocab, uint32_t bos, uint32_t eos,
			 void **blob, uint32_t *size, char *err, size_t errlen)
{
	*blob = NULL;
	*size = 0;
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!j) {
		rl_model_err(err, errlen, "tokenizer.json", "not JSON (line %d: %s)", je.line, je.text);
		return -EINVAL;
	}
	int rc = -ENOTSUP, byte_level = 0;
	json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
	if (!n_vocab) {        /* a tokenizer.json alone: its highest id + 1 */
		const char *k;
		json_t *v;
		size_t i;
		json_object_foreach(vocab, k, v)
			if (json_is_integer(v) && json_integer_value(v) >= n_vocab && json_integer_value(v) < (1 << 22))
				n_vocab = (uint32_t)json_integer_value(v) + 1;
		json_array_foreach(json_object_get(j, "added_tokens"), i, v) {
			json_int_t id = json_integer_value(json_object_get(v, "id"));
			if (id >= n_vocab && id < (1 << 22))
				n_vocab = (uint32_t)id + 1;
		}
	}
	const char **tok = calloc(n_vocab + 1, sizeof *tok), **mer = NULL;
	uint32_t *tl = calloc(n_vocab + 1, sizeof *tl), *ml = NULL;
	uint8_t *ty = malloc(n_vocab + 1);
	char **owned = NULL;   /* "left right" strings built from [left, right] merge pairs */
	size_t nm = 0;
	json_t *merges = json_object_get(model, "merges");
	const char *mtype = json_string_value(json_object_get(model, "type"));
	const char *ex[17] = { 0 }, *bad = NULL;
	size_t nex = find_exprs(json_object_get(j, "pre_tokenizer"), ex, 0, 16, &byte_level, &bad);
	char spec[8192];
	size_t spec_len = rl_pretok_spec(ex, 0, spec, sizeof spec);
	if (!tok || !tl || !ty) {
		rc = -ENOMEM;
		rl_model_err(err, errlen, "tokenizer.json", "out of memory");
		goto out;
	}
	if (bad || nex > 16 || spec_len > sizeof spec) {
		rl_model_err(err, errlen, "tokenizer.json", "pre-tokenizer %s is not one ringlm runs: give --tokenizer",
			     bad ? bad : "with that many steps");
		goto out;
	}
	if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab) || !json_is_array(merges) ||
	    !byte_level || !nex) {
		rl_model_err(err, errlen, "tokenizer.json", "not a byte-level BPE tokenizer (model %s%s): give --tokenizer",
			     mtype ? mtype : "?", byte_level ? "" : ", no ByteLevel pre-tokenizer");
		goto out;
	}
	memset(ty, RL_TT_NORMAL, n_vocab);
	const char *k;
	json_t *v;
	json_object_foreach(vocab, k, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id >= n_vocab)
			continue;      /* padded vocabularies: ids past the model's are unused */
		tok[id] = k;
		tl[id] = (uint32_t)strlen(k);
	}
	size_t i;
	json_array_foreach(json_object_get(j, "added_tokens"), i, v) {
		json_int_t id = json_integer_value(json_object_get(v, "id"));
		const char *c = json_string_value(json_object_get(v, "content"));
		if (!c || id < 0 || id >= n_vocab)
			continue;
		tok[id] = c;
		tl[id] = (uint32_t)strlen(c);
		ty[id] = json_is_true(json_object_get(v, "special")) ? RL_TT_CONTROL : RL_TT_USER;
	}
	for (uint32_t t = 0; t < n_vocab; t++)
		if (!tok[t]) {         /* a hole: an unused id that never matches */
			tok[t] = "";
			ty[t] = RL_TT_UNUSED;
		}
	nm = json_array_size(merges);
	mer = calloc(nm + 1, sizeof *mer);
	ml = calloc(nm + 1, sizeof *ml);
	owned = calloc(nm + 1, sizeof *owned);
	if (!mer || !ml || !owned) {
		rc = -ENOMEM;
		rl_model_err(err, errlen, "tokenizer.json", "out of memory");
		goto out;
	}
	json_array_foreach(merges, i, v) {
		if (json_is_string(v)) {           /* "left right" */
			mer[i] = json_string_value(v);
		} else if (json_is_array(v) && json_array_size(v) == 2) {   /* ["left", "right"] */
			const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
			if (a && b && asprintf(&owned[i], "%s %s", a, b) > 0)
				mer[i] = owned[i];
		}
		if (!mer[i])
			mer[i] = "";
		ml[i] = (uint32_t)strlen(mer[i]);
	}
	uint32_t flags = json_is_true(json_object_get(model, "ignore_merges")) ? RL_BPE_IGNORE_MERGES : 0;
	if (!template_adds_bos(json_object_get(j, "post_processor")))
		flags |= RL_BPE_NO_BOS;
	rc = rl_bpe_blob(n_vocab, tok, tl, ty, (uint32_t)nm, mer, ml, spec, (uint32_t)spec_len, bos, eos, flags,
			 blob, size);
	if (rc)
		rl_model_err(err, errlen, "tokenizer.json", "vocabulary too large");
out:
	if (owned)
		for (size_t m = 0; m < nm; m++)
			free(owned[m]);
	free(owned); free(tok); free(tl); free(ty); free(mer); free(ml);
	json_decref(j);
	return rc;
}
