/* rl_tok.c — llama2.c-compatible BPE tokenizer (see rl_tok.h). Pieces are compared as C
 * strings (up to their first NUL) exactly as llama2.c's strcmp-based lookup does, through a
 * sorted index built once at create. The merge loop keeps each adjacent pair's best merge
 * cached so one merge costs two lookups instead of a rescan of every pair; the choice (highest
 * score, leftmost on ties) is the same as llama2.c's. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_tok.h"

struct rl_tok {
	uint32_t  n;
	uint32_t  max_len;             /* longest key: longer concatenations cannot match */
	uint32_t  bos, eos;
	char     *text;                /* all pieces, each NUL-terminated */
	uint32_t *off;                 /* [n] piece start in text */
	uint32_t *klen;                /* [n] piece length up to its first NUL */
	float    *score;               /* [n] */
	uint32_t *sorted;              /* ids ordered by key (strcmp), then id */
	int32_t   byte_id[256];        /* fallback token of each byte */
	int32_t   space_id;            /* " " (the dummy prefix), -1 if absent */
	unsigned char bytes[256];      /* one-byte pieces for decode */
	struct rl_bpe *bpe;            /* a byte-level BPE vocabulary: everything goes there */
};

static const struct rl_tok *sort_ctx;

static int key_cmp(const char *a, size_t na, const char *b, size_t nb)
{
	int c = memcmp(a, b, na < nb ? na : nb);
	return c ? c : (na > nb) - (na < nb);
}

static int by_key(const void *x, const void *y)
{
	const struct rl_tok *t = sort_ctx;
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	int c = key_cmp(t->text + t->off[a], t->klen[a], t->text + t->off[b], t->klen[b]);
	return c ? c : (a > b) - (a < b);
}

/* Lowest id whose key equals s[0..n), or -1. */
static int32_t lookup(const struct rl_tok *t, const char *s, size_t n)
{
	uint32_t lo = 0, hi = t->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2, id = t->sorted[mid];
		if (key_cmp(t->text + t->off[id], t->klen[id], s, n) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->n) {
		uint32_t id = t->sorted[lo];
		if (!key_cmp(t->text + t->off[id], t->klen[id], s, n))
			return (int32_t)id;
	}
	return -1;
}

int rl_tok_create(const void *blob, size_t size, struct rl_tok **out, char *err, size_t errlen)
{
	const uint8_t *p = blob;
	*out = NULL;
	if (size < 4 || size > (1u << 30)) {
		snprintf(err, errlen, "tokenizer: blob of %zu bytes", size);
		return -EINVAL;
	}
	if (!memcmp(p, RL_BPE_MAGIC, 4)) {
		struct rl_tok *t = calloc(1, sizeof *t);
		if (!t)
			return -ENOMEM;
		int rc = rl_bpe_create(blob, size, &t->bpe, err, errlen);
		if (rc) {
			free(t);
			return rc;
		}
		t->n = rl_bpe_vocab_size(t->bpe);
		t->bos = rl_bpe_bos(t->bpe);
		t->eos = rl_bpe_eos(t->bpe);
		*out = t;
		return 0;
	}
	int32_t maxlen;
	memcpy(&maxlen, p, 4);
	if (maxlen <= 0 || maxlen > 65536) {
		snprintf(err, errlen, "tokenizer: max_token_length %d out of range", maxlen);
		return -EINVAL;
	}
	/* first pass: validate and count, up to the trailer if there is one */
	size_t off = 4, n = 0;
	uint32_t spm_flags = 0;
	while (off < size) {
		if (size - off == 8 && !memcmp(p + off, RL_SPM_TRAILER, 4)) {
			memcpy(&spm_flags, p + off + 4, 4);
			break;
		}
		int32_t len;
		float sc;
		if (size - off < 8) {
			snprintf(err, errlen, "tokenizer: truncated entry %zu at byte %zu", n, off);
			return -EINVAL;
		}
		memcpy(&sc, p + off, 4);
		memcpy(&len, p + off + 4, 4);
		if (isnan(sc) || len < 0 || len > maxlen || (size_t)len > size - off - 8) {
			snprintf(err, errlen, "tokenizer: entry %zu has a bad %s (length %d, max %d)",
				 n, isnan(sc) ? "score" : "length", len, maxlen);
			return -EINVAL;
		}
		off += 8 + (size_t)len;
		n++;
	}
	if (!n || n > (1u << 22)) {
		snprintf(err, errlen, "tokenizer: %zu tokens", n);
		return -EINVAL;
	}
	struct rl_tok *t = calloc(1, sizeof *t);
	if (!t)
		goto nomem;
	t->n = (uint32_t)n;
	t->bos = n > 1 ? 1 : 0;
	t->eos = n > 2 ? 2 : 0;
	t->text = malloc(size - 4 - 8 * n + n);
	t->off = malloc(n * sizeof *t->off);
	t->klen = malloc(n * sizeof *t->klen);
	t->score = malloc(n * sizeof *t->score);
	t->sorted = malloc(n * sizeof *t->sorted);
	if (!t->text || !t->off || !t->klen || !t->score || !t->sorted)
		goto nomem;
	size_t to = 0;
	off = 4;
	for (uint32_t i = 0; i < n; i++) {
		int32_t len;
		memcpy(&t->score[i], p + off, 4);
		memcpy(&len, p + off + 4, 4);
		t->off[i] = (uint32_t)to;
		memcpy(t->text + to, p + off + 8, len);
		t->text[to + len] = 0;
		t->klen[i] = (uint32_t)strlen(t->text + to);
		if (t->klen[i] > t->max_len)
			t->max_len = t->klen[i];
		to += len + 1;
		off += 8 + len;
		t->sorted[i] = i;
	}
	sort_ctx = t;              /* qsort has no context argument; create is not hot */
	qsort(t->sorted, n, sizeof *t->sorted, by_key);
	sort_ctx = NULL;
	for (int b = 0; b < 256; b++) {
		char s[8];
		snprintf(s, sizeof s, "<0x%02X>", b);
		int32_t id = lookup(t, s, 6);
		/* llama2.c assumes <0x00> is id 3; a vocabulary without byte pieces falls back to
		 * that same arithmetic (clamped to unk 0) */
		t->byte_id[b] = id >= 0 ? id : (b + 3 < (int)n ? b + 3 : 0);
		t->bytes[b] = (unsigned char)b;
	}
	t->space_id = spm_flags & RL_SPM_NO_PREFIX ? -1 : lookup(t, " ", 1);
	*out = t;
	return 0;
nomem:
	rl_tok_destroy(t);
	snprintf(err, errlen, "tokenizer: out of memory");
	return -ENOMEM;
}

int rl_tok_load(const char *path, struct rl_tok **out, char *err, size_t errlen)
{
	*out = NULL;
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: cannot open: %s", name, strerror(e));
		return -e;
	}
	struct stat st;
	char *buf = NULL;
	int rc = 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 30)) {
		snprintf(err, errlen, "%s: not a regular file of sane size", name);
		rc = -EINVAL;
	} else if (!(buf = malloc(st.st_size ? st.st_size : 1))) {
		snprintf(err, errlen, "%s: out of memory", name);
		rc = -ENOMEM;
	} else {
		size_t got = 0;
		while (got < (size_t)st.st_size) {
			ssize_t r = read(fd, buf + got, st.st_size - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				snprintf(err, errlen, "%s: read failed", name);
				rc = r < 0 ? -errno : -EINVAL;
				break;
			}
			got += r;
		}
	}
	close(fd);
	if (!rc) {
		char why[200];
		rc = rl_tok_create(buf, st.st_size, out, why, sizeof why);
		if (rc)
			snprintf(err, errlen, "%s: %s", name, why);
	}
	free(buf);
	return rc;
}

void rl_tok_destroy(struct rl_tok *t)
{
	if (!t)
		return;
	rl_bpe_destroy(t->bpe);
	free(t->text);
	free(t->off);
	free(t->klen);
	free(t->score);
	free(t->sorted);
	free(t);
}

uint32_t rl_tok_vocab_size(const struct rl_tok *t) { return t->n; }

void rl_tok_set_special(struct rl_tok *t, uint32_t bos, uint32_t eos)
{
	if (bos < t->n)
		t->bos = bos;
	if (eos < t->n)
		t->eos = eos;
}

/* Best merge of tokens a,b: the id of their concatenation, or -1. */
static int32_t pair_merge(const struct rl_tok *t, int32_t a, int32_t b, char *buf)
{
	size_t la = t->klen[a], lb = t->klen[b];
	if (la + lb > t->max_len)
		return -1;
	memcpy(buf, t->text + t->off[a], la);
	memcpy(buf + la, t->text + t->off[b], lb);
	return lookup(t, buf, la + lb);
}

long rl_tok_encode(const struct rl_tok *t, const char *text, size_t len, int bos, int eos,
		   int32_t *ids, size_t cap)
{
	return rl_tok_encode_ex(t, text, len, (bos ? RL_TOK_BOS : 0) | (eos ? RL_TOK_EOS : 0), ids, cap);
}

long rl_tok_encode_ex(const struct rl_tok *t, const char *text, size_t len, unsigned flags,
		      int32_t *ids, size_t cap)
{
	int bos = !!(flags & RL_TOK_BOS), eos = !!(flags & RL_TOK_EOS);
	if (t->bpe) {
		/* RL_TOK_BOS asks for the model's BOS where its vocabulary adds one (as llama.cpp's
		 * add_special): Qwen2's adds none */
		bos = bos && t->bos < t->n && rl_bpe_adds_bos(t->bpe);
		long n = rl_bpe_encode(t->bpe, text, len, bos ? (int32_t)t->bos : -1,
				       !!(flags & RL_TOK_SPECIAL), ids, cap);
		if (n >= 0 && eos && t->eos < t->n) {
			if ((size_t)n < cap)
				ids[n] = (int32_t)t->eos;
			n++;
		}
		return n;
	}
	size_t room = len + 3;
	int32_t *tk = malloc(room * sizeof *tk), *pm = malloc(room * sizeof *pm);
	char *buf = malloc(2 * (size_t)t->max_len + 8);
	if (!tk || !pm || !buf) {
		free(tk); free(pm); free(buf);
		return -ENOMEM;
	}
	size_t n = 0;
	if (bos)
		tk[n++] = (int32_t)t->bos;
	if (len && t->space_id >= 0)
		tk[n++] = t->space_id;
	/* one token per UTF-8 codepoint (at most 4 bytes, as llama2.c groups them), else bytes */
	size_t sl = 0;
	char cp[8];
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if ((c & 0xC0) != 0x80)
			sl = 0;
		cp[sl++] = (char)c;
		if (i + 1 < len && ((unsigned char)text[i + 1] & 0xC0) == 0x80 && sl < 4)
			continue;
		int32_t id = lookup(t, cp, sl);
		if (id >= 0)
			tk[n++] = id;
		else
			for (size_t k = 0; k < sl; k++)
				tk[n++] = t->byte_id[(unsigned char)cp[k]];
		sl = 0;
	}
	/* BOS takes part in the merges, as in llama2.c (its piece never merges in practice) */
	for (size_t i = 0; i + 1 < n; i++)
		pm[i] = pair_merge(t, tk[i], tk[i + 1], buf);
	while (n > 1) {
		float best = -1e10f;
		long bi = -1;
		for (size_t i = 0; i + 1 < n; i++)
			if (pm[i] >= 0 && t->score[pm[i]] > best) {
				best = t->score[pm[i]];
				bi = (long)i;
			}
		if (bi < 0)
			break;
		tk[bi] = pm[bi];
		memmove(tk + bi + 1, tk + bi + 2, (n - bi - 2) * sizeof *tk);
		if (bi + 2 < (long)n)
			memmove(pm + bi + 1, pm + bi + 2, (n - bi - 3) * sizeof *pm);
		n--;
		if (bi > 0)
			pm[bi - 1] = pair_merge(t, tk[bi - 1], tk[bi], buf);
		if ((size_t)bi + 1 < n)
			pm[bi] = pair_merge(t, tk[bi], tk[bi + 1], buf);
	}
	if (eos)
		tk[n++] = (int32_t)t->eos;
	memcpy(ids, tk, (n < cap ? n : cap) * sizeof *ids);
	free(tk); free(pm); free(buf);
	return (long)n;
}

const char *rl_tok_piece(const struct rl_tok *t, int32_t tok, size_t *len, float *score)
{
	if (tok < 0 || (uint32_t)tok >= t->n)
		return NULL;
	if (t->bpe) {
		if (score)
			*score = 0;
		return rl_bpe_decode(t->bpe, tok, len);
	}
	if (len)
		*len = t->klen[tok];
	if (score)
		*score = t->score[tok];
	return t->text + t->off[tok];
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

const char *rl_tok_decode(const struct rl_tok *t, int32_t prev, int32_t tok, size_t *len)
{
	if (t->bpe)
		return rl_bpe_decode(t->bpe, tok, len);   /* byte-level: no dummy prefix to drop */
	size_t n;
	const char *p = rl_tok_piece(t, tok, &n, NULL);
	if (!p)
		return NULL;
	if (prev >= 0 && (uint32_t)prev == t->bos && n && p[0] == ' ' && t->space_id >= 0) {
		p++;
		n--;
	}
	if (n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' && hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
		*len = 1;
		return (const char *)&t->bytes[hexval(p[3]) * 16 + hexval(p[4])];
	}
	*len = n;
	return p;
}

size_t rl_utf8_complete(const char *s, size_t n)
{
	for (size_t back = 1; back <= 4 && back <= n; back++) {
		unsigned char c = (unsigned char)s[n - back];
		if ((c & 0xc0) == 0x80)
			continue;              /* a continuation byte: look further back */
		size_t need = c >= 0xf8 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		return need > back ? n - back : n;
	}
	return n;                          /* no lead byte within reach: nothing to wait for */
}
