/* cmd_tokenize.c — `ringlm tokenize`: what the tokenizer does with a text, like llama.cpp's
 * llama-tokenize. Reads only the model's headers and vocabulary (no weights), through the
 * same loader and tokenizer clients use, and prints the ids on one line. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "clients/cli/cli.h"
#include "tokenizer/rl_chat.h"
#include "tokenizer/rl_tok.h"
#include "runtime/model/rl_model_io.h"
#include "runtime/model/rl_model_plan.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: ringlm tokenize --model PATH|tokenizer.json [--tokenizer FILE] [--no-bos] [--special]\n"
		   "                       (--text TEXT | --file FILE | --decode ID,ID,... | --chat MESSAGES.json)\n"
		   "  prints the token ids of TEXT (or of the whole FILE as one text) on one line, separated\n"
		   "  by spaces; --special parses control tokens written in the text (<|eot_id|>), as Hugging\n"
		   "  Face does by default; without it they are plain text. --decode prints the text of ids.\n"
		   "  --chat prints the ids ringlm prefills for a conversation (a JSON list of {\"role\", \"content\"},\n"
		   "  - for stdin): formatted by the model's chat template family, the assistant's turn opened.\n");
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *b = NULL;
	size_t cap = 0, len = 0, k;
	do {
		if (len == cap) {
			char *nb = realloc(b, cap = cap ? 2 * cap : 1 << 16);
			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
		}
	} while (f && (k = fread(b + len, 1, cap - len, f)) > 0 && (len += k));
	if (f)
		fclose(f);
	*n = len;
	return f ? b : (free(b), NULL);
}

int rl_cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *tokf = NULL, *text = NULL, *file = NULL, *decode = NULL, *chat = NULL;
	int bos = 1, special = 0;
	static const struct option lo[] = {
		{ "model", 1, 0, 'm' }, { "tokenizer", 1, 0, 't' }, { "text", 1, 0, 'x' },
		{ "file", 1, 0, 'f' }, { "decode", 1, 0, 'd' }, { "no-bos", 0, 0, 'b' },
		{ "special", 0, 0, 's' }, { "chat", 1, 0, 'c' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
	optind = 1;
	opterr = 0;
	int o;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case 'm': model = optarg; break;
		case 't': tokf = optarg; break;
		case 'x': text = optarg; break;
		case 'f': file = optarg; break;
		case 'd': decode = optarg; break;
		case 'b': bos = 0; break;
		case 's': special = 1; break;
		case 'c': chat = optarg; break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "ringlm tokenize: %s option '%s'; see ringlm tokenize --help\n",
				o == ':' ? "missing value for" : "unknown", argv[optind - 1]);
			return 2;
		}
	}
	if (!model || (!!text + !!file + !!decode + !!chat) != 1) {
		fprintf(stderr, "ringlm tokenize: give --model and exactly one of --text, --file, --decode, --chat\n");
		return 2;
	}
	struct rl_model_plan p;
	char err[512];
	size_t ml = strlen(model);
	int rc;
	if (!tokf && ml > 5 && !strcmp(model + ml - 5, ".json")) {
		/* a Hugging Face tokenizer.json on its own */
		memset(&p, 0, sizeof p);
		p.cfg.bos_id = p.cfg.eos_id = UINT32_MAX;
		rc = rl_hf_tokenizer_blob(model, 0, UINT32_MAX, UINT32_MAX, &p.vocab_blob, &p.vocab_blob_size,
					  err, sizeof err);
	} else if (!tokf && !chat && ml > 5 && !strcmp(model + ml - 5, ".gguf")) {
		/* the vocabulary alone: vocab-only GGUFs (llama.cpp's ggml-vocab-*.gguf) work too */
		memset(&p, 0, sizeof p);
		p.cfg.bos_id = p.cfg.eos_id = UINT32_MAX;
		rc = rl_gguf_read_vocab(model, &p.vocab_blob, &p.vocab_blob_size, err, sizeof err);
	} else {
		rc = rl_model_plan_open(model, tokf, &p, err, sizeof err);
	}
	if (rc) {
		fprintf(stderr, "ringlm tokenize: %s\n", err);
		return 1;
	}
	if (!p.vocab_blob) {
		fprintf(stderr, "ringlm tokenize: %s has no vocabulary; give --tokenizer FILE (llama2.c tokenizer.bin)\n", model);
		rl_model_plan_close(&p);
		return 1;
	}
	struct rl_tok *t;
	rc = rl_tok_create(p.vocab_blob, p.vocab_blob_size, &t, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ringlm tokenize: %s\n", err);
		rl_model_plan_close(&p);
		return 1;
	}
	rl_tok_set_special(t, p.cfg.bos_id, p.cfg.eos_id);
	enum rl_chat_family fam = rl_chat_from_name(p.chat_template);
	char sys[sizeof p.chat_system];
	snprintf(sys, sizeof sys, "%s", p.chat_system);
	rl_model_plan_close(&p);
	char *fmt = NULL;
	if (chat) {
		/* as ringlm-http's chat path: the family's format, tokenized with control tokens
		 * parsed and no BOS added (the format writes the family's own) */
		json_error_t je;
		json_t *j = !strcmp(chat, "-") ? json_loadf(stdin, 0, &je) : json_load_file(chat, 0, &je);
		size_t n = json_array_size(j);
		struct rl_chat_msg *m = calloc(n + 1, sizeof *m);
		long len = -EINVAL;
		for (size_t i = 0; m && i < n; i++) {
			m[i].role = json_string_value(json_object_get(json_array_get(j, i), "role"));
			m[i].content = json_string_value(json_object_get(json_array_get(j, i), "content"));
		}
		if (!j || !json_is_array(j))
			fprintf(stderr, "ringlm tokenize: %s is not a JSON list of messages (%s); give [{\"role\": \"user\", "
				"\"content\": \"...\"}]\n", chat, j ? "not a list" : je.text);
		else if (fam == RL_CHAT_NONE)
			fprintf(stderr, "ringlm tokenize: %s has no chat template ringlm formats; use --text\n", model);
		else if (!m || (len = rl_chat_format(fam, sys, m, n, NULL, 0)) < 0 || !(fmt = malloc((size_t)len + 1)))
			fprintf(stderr, "ringlm tokenize: %s: %s\n", chat, len < 0 ? "a role ringlm's chat format refuses here "
				"(system, user, assistant; Gemma and Mistral alternate user/assistant and end with user)" :
				strerror(ENOMEM));
		else
			rl_chat_format(fam, sys, m, n, fmt, (size_t)len + 1);
		free(m);
		json_decref(j);
		if (!fmt) {
			rl_tok_destroy(t);
			return 1;
		}
		text = fmt;
		bos = 0;
		special = 1;
	}
	if (decode) {
		for (char *s = (char *)decode, *e; *s; s = *e ? e + 1 : e) {
			long id = strtol(s, &e, 10);
			size_t n;
			const char *piece = e != s ? rl_tok_decode(t, -1, (int32_t)id, &n) : NULL;
			if (!piece || (*e && *e != ',')) {
				fprintf(stderr, "\nringlm tokenize: '%.*s' is not a token id below %u\n",
					(int)strcspn(s, ","), s, rl_tok_vocab_size(t));
				rl_tok_destroy(t);
				return 2;
			}
			fwrite(piece, 1, n, stdout);
		}
		putchar('\n');
		rl_tok_destroy(t);
		return 0;
	}
	size_t len = text ? strlen(text) : 0;
	char *buf = NULL;
	if (file && !(buf = read_file(file, &len))) {
		fprintf(stderr, "ringlm tokenize: cannot read %s: %s\n", file, strerror(errno));
		rl_tok_destroy(t);
		return 1;
	}
	size_t cap = 3 * len + 8;      /* rl_tok.h: 3 x len + 3 always suffices */
	int32_t *ids = malloc(cap * sizeof *ids);
	long n = ids ? rl_tok_encode_ex(t, buf ? buf : text, len, (bos ? RL_TOK_BOS : 0) | (special ? RL_TOK_SPECIAL : 0),
					ids, cap) : -ENOMEM;
	if (n < 0 || (size_t)n > cap) {
		fprintf(stderr, "ringlm tokenize: %s\n", strerror(n < 0 ? (int)-n : ENOSPC));
		rc = 1;
	} else {
		for (long i = 0; i < n; i++)
			printf(i ? " %d" : "%d", ids[i]);
		putchar('\n');
		rc = 0;
	}
	free(ids);
	free(buf);
	free(fmt);
	rl_tok_destroy(t);
	return rc;
}
