/* tokenize.c — ringlm_tokenize / ringlm_detokenize / the text stream over the vocabulary the runtime publishes
 * in its info segment (rl_tok.h's blobs), so clients need no model file; ringlm_chat_format
 * with the chat template family it publishes beside it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "clients/libringlm_internal.h"
#include "tokenizer/rl_chat.h"
#include "tokenizer/rl_tok.h"

static struct rl_tok *tok_of(struct ringlm *c)
{
	if (c->tok)
		return c->tok;
	const struct rl_info *in = c->info;
	if (!in->vocab_size_bytes || in->vocab_off < sizeof *in || in->vocab_off + (uint64_t)in->vocab_size_bytes > in->size)
		return NULL;
	struct rl_tok *t;
	char err[128];
	if (rl_tok_create((const uint8_t *)in + in->vocab_off, in->vocab_size_bytes, &t, err, sizeof err))
		return NULL;
	rl_tok_set_special(t, in->bos_id, in->eos_id);
	c->tok = t;
	return t;
}

int ringlm_tokenize_ex(struct ringlm *c, const char *text, unsigned flags, uint32_t *ids, int max_ids)
{
	struct rl_tok *t = tok_of(c);
	if (!t)
		return rl_client_fail(-ENOENT, "ringlm_tokenize: the runtime's model has no vocabulary (a sim backend, or a .bin model "
				      "started without --tokenizer): submit token ids directly");
	if (!text)
		return rl_client_fail(-EINVAL, "ringlm_tokenize: text is NULL");
	unsigned f = (flags & RINGLM_TOKENIZE_BOS ? RL_TOK_BOS : 0) | (flags & RINGLM_TOKENIZE_SPECIAL ? RL_TOK_SPECIAL : 0);
	long n = rl_tok_encode_ex(t, text, strlen(text), f, (int32_t *)ids, max_ids > 0 ? max_ids : 0);
	if (n < 0)
		return rl_client_fail((int)n, "ringlm_tokenize: %s", strerror((int)-n));
	if (n > max_ids)
		return rl_client_fail(-ENOSPC, "ringlm_tokenize: the text needs %ld ids and max_ids is %d: give a larger buffer",
				      n, max_ids);
	return (int)n;
}

int ringlm_chat_format(struct ringlm *c, const struct ringlm_chat_msg *m, int n, char *out, int cap)
{
	enum rl_chat_family f = rl_chat_from_name(c->info->chat_template);
	if (!f)
		return rl_client_fail(-ENOTSUP, "ringlm_chat_format: the model has no chat template ringlm knows "
				      "(Llama 3, ChatML, Mistral, Phi-3, Gemma): format the prompt yourself");
	if (!m || n <= 0 || cap < 0 || (cap && !out))
		return rl_client_fail(-EINVAL, "ringlm_chat_format: give at least one message and a buffer");
	struct rl_chat_msg *x = calloc((size_t)n, sizeof *x);
	if (!x)
		return rl_client_fail(-ENOMEM, "ringlm_chat_format: out of memory");
	for (int i = 0; i < n; i++)
		x[i] = (struct rl_chat_msg){ m[i].role, m[i].content };
	long len = rl_chat_format(f, c->info->chat_system, x, (size_t)n, out, (size_t)cap);
	free(x);
	if (len < 0)
		return rl_client_fail((int)len, "ringlm_chat_format: the roles must be system, user or assistant%s",
				      f == RL_CHAT_MISTRAL || f == RL_CHAT_GEMMA ?
				      ", alternating user/assistant and ending with user" : "");
	if (len > INT32_MAX - 1)
		return rl_client_fail(-E2BIG, "ringlm_chat_format: the conversation is too long");
	return (int)len;
}

int ringlm_tokenize(struct ringlm *c, const char *text, int add_bos, uint32_t *ids, int max_ids)
{
	return ringlm_tokenize_ex(c, text, add_bos ? RINGLM_TOKENIZE_BOS : 0, ids, max_ids);
}

const char *ringlm_detokenize(struct ringlm *c, uint32_t prev, uint32_t id, char *buf, size_t len)
{
	struct rl_tok *t = tok_of(c);
	size_t n;
	const char *s = t ? rl_tok_decode(t, prev == UINT32_MAX ? -1 : (int32_t)prev, (int32_t)id, &n) : NULL;
	if (!s || !len)
		return NULL;
	if (n >= len)
		n = len - 1;
	memcpy(buf, s, n);
	buf[n] = 0;
	return buf;
}

void ringlm_textstream_init(struct ringlm_textstream *s, uint32_t prev)
{
	memset(s, 0, sizeof *s);
	s->prev = prev;
}

int ringlm_textstream_push(struct ringlm *c, struct ringlm_textstream *s, uint32_t id, char *buf, size_t len)
{
	struct rl_tok *t = tok_of(c);
	if (!t)
		return rl_client_fail(-ENOENT, "ringlm_textstream_push: the runtime's model has no vocabulary: "
				      "the token ids are all there is");
	size_t n;
	const char *p = rl_tok_decode(t, s->prev == UINT32_MAX ? -1 : (int32_t)s->prev, (int32_t)id, &n);
	if (!p)
		n = 0;                 /* an id outside the vocabulary spells nothing */
	if (!buf || s->n_held + n + 1 > len)
		return rl_client_fail(-ENOSPC, "ringlm_textstream_push: the piece needs %zu bytes and buf has %zu: "
				      "give a buffer of 260 bytes", s->n_held + n + 1, buf ? len : 0);
	memcpy(buf, s->held, s->n_held);
	memcpy(buf + s->n_held, p, n);
	n += s->n_held;
	size_t cut = rl_utf8_complete(buf, n);
	s->n_held = (uint32_t)(n - cut);   /* at most 3 by rl_utf8_complete */
	memcpy(s->held, buf + cut, s->n_held);
	buf[cut] = 0;
	s->prev = id;
	return (int)cut;
}

int ringlm_textstream_flush(struct ringlm_textstream *s, char *buf, size_t len)
{
	if (!buf || !len)
		return 0;
	size_t n = s->n_held < len - 1 ? s->n_held : len - 1;
	memcpy(buf, s->held, n);
	buf[n] = 0;
	s->n_held = 0;
	return (int)n;
}
