/* rl_tok.c — the SentencePiece tokenizer (see rl_tok.h) and the front of both kinds. Pieces
 * are compared as C strings (up to their first NUL) as llama2.c's strcmp-based lookup does,
 * through a sorted index built once at create; where a text is several pieces the last id
 * wins, as in llama.cpp's token_to_id. The merges run over a heap of adjacent pairs, highest
 * score first and leftmost on ties: llama.cpp's llm_tokenizer_spm, which for a llama2.c
 * vocabulary gives what llama2.c's encode() gives. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_partition.h"
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
	uint32_t  flags;               /* RL_SPM_* */
	uint8_t  *type;                /* [n] enum rl_tok_type, or NULL (a llama2.c vocabulary) */
	struct rl_specials specials;   /* user-defined and control pieces, as they are cut */
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
	return c ? c : (a < b) - (a > b);
}

/* Position in the sorted index of the highest id whose key equals s[0..n), or -1. */
static long lookup_at(const struct rl_tok *t, const char *s, size_t n)
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
			return (long)lo;
	}
	return -1;
}

static int32_t lookup(const struct rl_tok *t, const char *s, size_t n)
{
	long at = lookup_at(t, s, n);
	return at < 0 ? -1 : (int32_t)t->sorted[at];
}

/* The piece a merge of adjacent pieces makes: as lookup, but never a user-defined piece (their
 * text is written with real spaces, which llama.cpp's escaped text no longer has). */
static int32_t lookup_merge(const struct rl_tok *t, const char *s, size_t n)
{
	long at = lookup_at(t, s, n);
	for (; at >= 0 && (uint32_t)at < t->n; at++) {
		uint32_t id = t->sorted[at];
		if (key_cmp(t->text + t->off[id], t->klen[id], s, n))
			return -1;
		if (!t->type || t->type[id] != RL_TT_USER)
			return (int32_t)id;
	}
	return -1;
}

void rl_tok_spm_trailer(const void *blob, size_t size, struct rl_spm_trailer *t)
{
	const uint8_t *p = blob;
	*t = (struct rl_spm_trailer){ 0, 0, 0, 1, 2, NULL };
	if (size >= 12 && !memcmp(p + size - 8, RL_SPM_TRAILER, 4)) {
		t->len = 8;
		memcpy(&t->flags, p + size - 4, 4);
	} else if (size >= 24 && !memcmp(p + size - 4, RL_SPM_TRAILER2, 4)) {
		uint32_t v[4];
		memcpy(v, p + size - 20, 16);
		if (v[0] <= (1u << 22) && v[0] <= size - 24) {
			t->len = 20 + (size_t)v[0];
			t->n = v[0];
			t->flags = v[1];
			t->bos = v[2];
			t->eos = v[3];
			t->type = p + size - t->len;
		}
	}
}

/* A piece's text as the file spells it: llama2.c's "\n<s>\n" BOS and EOS lose their newlines */
static const char *piece_text(const struct rl_tok *t, uint32_t id, size_t *len)
{
	const char *s = t->text + t->off[id];
	size_t l = t->klen[id];
	if ((id == t->bos || id == t->eos) && l >= 3 && s[0] == '\n' && s[l - 1] == '\n') {
		s++;
		l -= 2;
	}
	*len = l;
	return s;
}

/* rl_partition's view of the vocabulary (pieces of known type only) */
static int special_kind(const void *v, uint32_t id)
{
	const struct rl_tok *t = v;
	int ty = t->type[id];
	size_t l;
	const char *s = piece_text(t, id, &l);
	if ((ty == RL_TT_USER || ty == RL_TT_NORMAL) && rl_specials_eog_text(s, l))
		return 2;
	return ty == RL_TT_USER ? 1 : ty == RL_TT_CONTROL || ty == RL_TT_UNKNOWN ? 2 : 0;
}
static const char *special_text(const void *v, uint32_t id, uint32_t *len)
{
	size_t l;
	const char *s = piece_text(v, id, &l);
	*len = (uint32_t)l;
	return s;
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
	struct rl_spm_trailer tr;
	rl_tok_spm_trailer(blob, size, &tr);
	size_t off = 4, n = 0, end = size - tr.len;
	while (off < end) {
		int32_t len;
		float sc;
		if (end - off < 8) {
			snprintf(err, errlen, "tokenizer: truncated entry %zu at byte %zu", n, off);
			return -EINVAL;
		}
		memcpy(&sc, p + off, 4);
		memcpy(&len, p + off + 4, 4);
		if (isnan(sc) || len < 0 || len > maxlen || (size_t)len > end - off - 8) {
			snprintf(err, errlen, "tokenizer: entry %zu has a bad %s (length %d, max %d)",
				 n, isnan(sc) ? "score" : "length", len, maxlen);
			return -EINVAL;
		}
		off += 8 + (size_t)len;
		n++;
	}
	if (!n || n > (1u << 22) || (tr.type && tr.n != n)) {
		snprintf(err, errlen, "tokenizer: %zu tokens%s", n, tr.type && tr.n != n ? " where its trailer says otherwise" : "");
		return -EINVAL;
	}
	struct rl_tok *t = calloc(1, sizeof *t);
	if (!t)
		goto nomem;
	t->n = (uint32_t)n;
	t->bos = tr.bos < n ? tr.bos : n > 1 ? 1 : 0;
	t->eos = tr.eos < n ? tr.eos : n > 2 ? 2 : 0;
	t->flags = tr.flags;
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
	t->space_id = t->flags & RL_SPM_NO_PREFIX ? -1 : lookup(t, " ", 1);
	if (tr.type) {
		if (!(t->type = malloc(n)))
			goto nomem;
		memcpy(t->type, tr.type, n);
		if (rl_specials_build(&t->specials, t->n, special_kind, special_text, t))
			goto nomem;
	}
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
	rl_specials_free(&t->specials);
	free(t->type);
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

long rl_tok_encode(const struct rl_tok *t, const char *text, size_t len, int bos, int eos,
		   int32_t *ids, size_t cap)
{
	return rl_tok_encode_ex(t, text, len, (bos ? RL_TOK_BOS : 0) | (eos ? RL_TOK_EOS : 0), ids, cap);
}

struct out { int32_t *ids; size_t cap, n; };
static void emit(struct out *o, int32_t id)
{
	if (o->n < o->cap)
		o->ids[o->n] = id;
	o->n++;
}

/* A pair of adjacent symbols that is a piece: the heap orders pairs by score, then leftmost. */
struct pair { float score; uint32_t left, right, size; };
static int before(const struct pair *a, const struct pair *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}
struct sym { uint32_t off, n; int32_t prev, next; };
struct heap { struct pair *p; size_t n; };

static void heap_push(struct heap *h, struct pair x)
{
	size_t i = h->n++;
	while (i && before(&x, &h->p[(i - 1) / 2])) {
		h->p[i] = h->p[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->p[i] = x;
}

static struct pair heap_pop(struct heap *h)
{
	struct pair top = h->p[0], x = h->p[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && before(&h->p[c + 1], &h->p[c]))
			c++;
		if (!before(&h->p[c], &x))
			break;
		h->p[i] = h->p[c];
		i = c;
	}
	if (h->n)
		h->p[i] = x;
	return top;
}

static void try_pair(const struct rl_tok *t, const char *s, const struct sym *y, int32_t l, int32_t r,
		     struct heap *h)
{
	if (l < 0 || r < 0)
		return;
	uint32_t size = y[l].n + y[r].n;
	if (size > t->max_len)
		return;
	int32_t id = lookup_merge(t, s + y[l].off, size);
	if (id >= 0)
		heap_push(h, (struct pair){ t->score[id], (uint32_t)l, (uint32_t)r, size });
}

/* One stretch of text, spaces already as the vocabulary spells them; prefix: s starts with
 * the " " added before it (llama2.c keeps that one a symbol of its own). */
static int spm_text(const struct rl_tok *t, const char *s, size_t n, int prefix, struct out *o)
{
	if (!n)
		return 0;
	struct sym *y = malloc(n * sizeof *y);
	struct heap h = { malloc(2 * n * sizeof *h.p), 0 };   /* each merge adds at most 2 pairs */
	if (!y || !h.p) {
		free(y);
		free(h.p);
		return -ENOMEM;
	}
	size_t m = 0;
	for (size_t i = 0; i < n; m++) {
		unsigned char c = (unsigned char)s[i];
		size_t k = 1;
		if (t->type)       /* a GGUF vocabulary: the lead byte decides (llama.cpp's unicode_len_utf8) */
			k = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
		else               /* a llama2.c one: a byte and the continuation bytes after it, as llama2.c groups them */
			while (k < 4 && i + k < n && ((unsigned char)s[i + k] & 0xC0) == 0x80 && !(prefix && !i))
				k++;
		if (k > n - i)
			k = n - i;
		y[m] = (struct sym){ (uint32_t)i, (uint32_t)k, (int32_t)m - 1, i + k < n ? (int32_t)m + 1 : -1 };
		i += k;
	}
	for (size_t i = 1; i < m; i++)
		try_pair(t, s, y, (int32_t)i - 1, (int32_t)i, &h);
	while (h.n) {
		struct pair b = heap_pop(&h);
		struct sym *l = &y[b.left], *r = &y[b.right];
		if (!l->n || !r->n || l->n + r->n != b.size)
			continue;          /* one side merged since: a stale pair */
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			y[r->next].prev = (int32_t)b.left;
		try_pair(t, s, y, l->prev, (int32_t)b.left, &h);
		try_pair(t, s, y, (int32_t)b.left, l->next, &h);
	}
	for (int32_t i = 0; i >= 0; i = y[i].next) {
		int32_t id = lookup(t, s + y[i].off, y[i].n);
		if (id >= 0)
			emit(o, id);
		else               /* a character that is no piece: its bytes */
			for (uint32_t k = 0; k < y[i].n; k++)
				emit(o, t->byte_id[(unsigned char)s[y[i].off + k]]);
	}
	free(y);
	free(h.p);
	return 0;
}

/* A stretch between special tokens: the " " before it where one goes, and U+2581 (which
 * llama.cpp cannot tell from an escaped space) as a space. */
size_t rl_tok_spm_spaces(char *dst, const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++, k++) {
		int sp = i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3);
		if (dst)
			dst[k] = sp ? ' ' : s[i];
		i += sp ? 2 : 0;
	}
	return k;
}

static int spm_stretch(const struct rl_tok *t, const char *s, size_t n, int prefix, struct out *o)
{
	char *b = malloc(n + 2);
	if (!b)
		return -ENOMEM;
	if (prefix)
		b[0] = ' ';
	size_t k = (prefix != 0) + rl_tok_spm_spaces(b + (prefix != 0), s, n);
	int rc = spm_text(t, b, k, prefix, o);
	free(b);
	return rc;
}

long rl_tok_encode_ex(const struct rl_tok *t, const char *text, size_t len, unsigned flags,
		      int32_t *ids, size_t cap)
{
	int add = !!(flags & RL_TOK_BOS), eos = !!(flags & RL_TOK_EOS);
	if (t->bpe) {
		/* RL_TOK_BOS asks for the model's BOS where its vocabulary adds one (as llama.cpp's
		 * add_special): Qwen2's adds none */
		int bos = add && t->bos < t->n && rl_bpe_adds_bos(t->bpe);
		long n = rl_bpe_encode(t->bpe, text, len, bos ? (int32_t)t->bos : -1,
				       !!(flags & RL_TOK_SPECIAL), ids, cap);
		if (n >= 0 && (eos || (add && rl_bpe_adds_eos(t->bpe))) && t->eos < t->n) {
			if ((size_t)n < cap)
				ids[n] = (int32_t)t->eos;
			n++;
		}
		return n;
	}
	struct out o = { ids, cap, 0 };
	if (add && !(t->flags & RL_SPM_NO_BOS))
		emit(&o, (int32_t)t->bos);
	struct rl_frag one = { 0, len, -1 }, *f = &one;
	long nf = len ? 1 : 0, rc = 0;
	if (t->specials.n && len && (nf = rl_partition(&t->specials, text, len, !!(flags & RL_TOK_SPECIAL), &f)) < 0)
		return nf;
	int after_special = 1;             /* the text's start counts as one */
	for (long i = 0; i < nf && !rc; i++) {
		if (f[i].tok >= 0) {
			emit(&o, f[i].tok);
			after_special = 1;
		} else {
			rc = spm_stretch(t, text + f[i].off, f[i].len, after_special && t->space_id >= 0, &o);
			after_special = 0;
		}
	}
	if (f != &one)
		free(f);
	if (rc)
		return rc;
	if (eos || (add && (t->flags & RL_SPM_ADD_EOS)))
		emit(&o, (int32_t)t->eos);
	return (long)o.n;
}

size_t rl_tok_eog_ids(const struct rl_tok *t, uint32_t *ids, size_t cap)
{
	size_t n = 0;
	if (t->eos < t->n && cap)
		ids[n++] = t->eos;
	for (uint32_t id = 0; id < t->n; id++) {
		size_t l;
		const char *s = t->bpe ? rl_bpe_decode(t->bpe, (int32_t)id, &l) : piece_text(t, id, &l);
		if (id != t->eos && s && rl_specials_eog_text(s, l)) {
			if (n < cap)
				ids[n] = id;
			n++;
		}
	}
	return n;
}

int rl_tok_type(const struct rl_tok *t, int32_t tok)
{
	if (tok < 0 || (uint32_t)tok >= t->n)
		return -1;
	if (t->bpe)
		return rl_bpe_type(t->bpe, tok);
	if (t->type)
		return t->type[tok];
	return (uint32_t)tok == t->bos || (uint32_t)tok == t->eos ? RL_TT_CONTROL : RL_TT_NORMAL;
}

int rl_tok_special_kind(const struct rl_tok *t, int32_t tok)
{
	if (tok < 0 || (uint32_t)tok >= t->n)
		return -1;
	if (t->bpe)
		return rl_bpe_special_kind(t->bpe, tok);
	return t->type ? special_kind(t, (uint32_t)tok) : (uint32_t)tok == t->bos || (uint32_t)tok == t->eos ? 2 : 0;
}

const char *rl_tok_text(const struct rl_tok *t, int32_t tok, size_t *len)
{
	if (tok < 0 || (uint32_t)tok >= t->n)
		return NULL;
	if (t->bpe)
		return rl_bpe_piece(t->bpe, tok, len);
	return piece_text(t, (uint32_t)tok, len);
}

const struct rl_bpe *rl_tok_bpe(const struct rl_tok *t) { return t->bpe; }

uint32_t rl_tok_spm_flags(const struct rl_tok *t) { return t->bpe ? 0 : t->flags; }

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
