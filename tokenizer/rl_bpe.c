/* rl_bpe.c — byte-level BPE (see rl_bpe.h): the GPT-2 byte-to-code-point map, a vocabulary
 * hash, merge ranks keyed by (left id, right id); the special-token cut (rl_partition.h) and
 * the pre-tokenizer (rl_pretok.h) run first. Reference behaviour: llama.cpp's
 * llm_tokenizer_bpe (tests/fixtures/llamacpp) and Hugging Face tokenizers (test_bpe). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_partition.h"
#include "tokenizer/rl_pretok.h"

/* ---- blob ---------------------------------------------------------------------------- */

int rl_bpe_blob(uint32_t n, const char *const *tok, const uint32_t *tl, const uint8_t *type,
		uint32_t nm, const char *const *merge, const uint32_t *ml, const char *spec,
		uint32_t spec_len, uint32_t bos, uint32_t eos, uint32_t flags, void **blob, uint32_t *size)
{
	uint64_t pl = spec_len, total = 28 + pl;
	for (uint32_t i = 0; i < n; i++)
		total += 5 + (uint64_t)tl[i];
	for (uint32_t i = 0; i < nm; i++)
		total += 4 + (uint64_t)ml[i];
	if (total > (1u << 30))
		return -EINVAL;
	uint8_t *b = malloc(total), *p = b;
	if (!b)
		return -ENOMEM;
#define PUT32(v) do { uint32_t x_ = (v); memcpy(p, &x_, 4); p += 4; } while (0)
	memcpy(p, RL_BPE_MAGIC, 4);
	p += 4;
	PUT32(n); PUT32(nm); PUT32(bos); PUT32(eos); PUT32(flags); PUT32((uint32_t)pl);
	memcpy(p, spec, pl);
	p += pl;
	for (uint32_t i = 0; i < n; i++) {
		*p++ = type ? type[i] : RL_TT_NORMAL;
		PUT32(tl[i]);
		memcpy(p, tok[i], tl[i]);
		p += tl[i];
	}
	for (uint32_t i = 0; i < nm; i++) {
		PUT32(ml[i]);
		memcpy(p, merge[i], ml[i]);
		p += ml[i];
	}
#undef PUT32
	*blob = b;
	*size = (uint32_t)total;
	return 0;
}

/* ---- the tokenizer ------------------------------------------------------------------- */

struct rl_bpe {
	uint32_t n, bos, eos, flags;
	const uint8_t *blob;           /* our copy; tokens point into it */
	uint32_t *off, *len;           /* [n] token text in blob */
	uint8_t  *type;                /* [n] */
	uint8_t  *dec;                 /* decoded bytes of every token */
	uint32_t *doff, *dlen;         /* [n] */
	uint32_t *vhash, vmask;        /* open addressing: id + 1, 0 = empty */
	uint64_t *mkey;                /* merge table: key (left << 32 | right) */
	uint32_t *mrank, *mres, mmask; /* rank + 1 (0 = empty), merged id */
	uint32_t  nm, *moff;           /* the merges as the blob spells them: [nm] offsets */
	uint32_t  spec_len;            /* the pre-tokenizer spec, at blob + 28 */
	int32_t   byte_sym[256];       /* token of each byte's code point */
	int32_t   byte_tok[256];       /* RL_BPE_RAW: the <0xNN> token of each byte, or -1 */
	char      byte_u8[256][2];     /* each byte's code point in UTF-8 (1 or 2 bytes) */
	uint8_t   byte_u8n[256];
	struct rl_specials specials;   /* control and user-defined tokens, as they are cut */
	struct rl_pretok *pre;
};

static uint32_t fnv(const void *s, size_t n)
{
	const uint8_t *p = s;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static int32_t vfind(const struct rl_bpe *b, const char *s, size_t n)
{
	for (uint32_t h = fnv(s, n) & b->vmask;; h = (h + 1) & b->vmask) {
		uint32_t id = b->vhash[h];
		if (!id)
			return -1;
		id--;
		if (b->len[id] == n && !memcmp(b->blob + b->off[id], s, n))
			return (int32_t)id;
	}
}

static uint64_t mix(uint64_t k) { k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; return k; }

static int merge_find(const struct rl_bpe *b, int32_t l, int32_t r, uint32_t *rank, int32_t *res)
{
	uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	for (uint32_t h = (uint32_t)mix(key) & b->mmask;; h = (h + 1) & b->mmask) {
		if (!b->mrank[h])
			return 0;
		if (b->mkey[h] == key) {
			*rank = b->mrank[h] - 1;
			*res = (int32_t)b->mres[h];
			return 1;
		}
	}
}

/* GPT-2's map: printable Latin-1 bytes stand for themselves, the others for 256 + k */
static uint32_t byte_cp(uint8_t c)
{
	if ((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)
		return c;
	uint32_t k = 0;
	for (uint32_t x = 0; x < c; x++)
		k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
	return 256 + k;
}

static int utf8_put(uint32_t cp, char *o)
{
	if (cp < 0x80) { o[0] = (char)cp; return 1; }
	if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
	o[0] = (char)(0xe0 | cp >> 12);
	o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[2] = (char)(0x80 | (cp & 0x3f));
	return 3;
}

/* next code point of s[0..n) (malformed: one byte as U+FFFD); its length in *k */
static uint32_t utf8_get(const uint8_t *s, size_t n, size_t *k)
{
	uint32_t c = s[0];
	size_t need = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
	if (need == 0 || need == 9 || need >= n) {
		*k = 1;
		return need ? 0xfffd : c;
	}
	c &= 0x3f >> need;
	for (size_t i = 1; i <= need; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*k = 1;
			return 0xfffd;
		}
		c = c << 6 | (s[i] & 0x3f);
	}
	*k = need + 1;
	return c;
}

/* rl_partition's view of the vocabulary: user-defined tokens are cut always, control and
 * unknown ones when parsing specials */
static int special_kind(const void *v, uint32_t id)
{
	const struct rl_bpe *b = v;
	int t = b->type[id];
	if ((t == RL_TT_USER || t == RL_TT_NORMAL) && rl_specials_eog_text((const char *)b->blob + b->off[id], b->len[id]))
		return 2;
	return t == RL_TT_USER ? 1 : t == RL_TT_CONTROL || t == RL_TT_UNKNOWN ? 2 : 0;
}
static const char *special_text(const void *v, uint32_t id, uint32_t *len)
{
	const struct rl_bpe *b = v;
	*len = b->len[id];
	return (const char *)b->blob + b->off[id];
}

#define BAD(...) do { snprintf(err, errlen, "tokenizer: " __VA_ARGS__); goto fail; } while (0)

int rl_bpe_create(const void *blob, size_t size, struct rl_bpe **out, char *err, size_t errlen)
{
	*out = NULL;
	if (size < 28 || memcmp(blob, RL_BPE_MAGIC, 4) || size > (1u << 30)) {
		snprintf(err, errlen, "tokenizer: not a byte-level BPE blob");
		return -EINVAL;
	}
	struct rl_bpe *b = calloc(1, sizeof *b);
	uint8_t *cp = malloc(size);
	if (!b || !cp) {
		free(b);
		free(cp);
		snprintf(err, errlen, "tokenizer: out of memory");
		return -ENOMEM;
	}
	memcpy(cp, blob, size);
	b->blob = cp;
	uint32_t h[6];
	memcpy(h, cp + 4, 24);
	b->n = h[0];
	uint32_t nm = h[1], pl = h[5];
	b->bos = h[2];
	b->eos = h[3];
	b->flags = h[4];
	size_t o = 28;
	if (!b->n || b->n > (1u << 22) || nm > (1u << 24) || pl > size - o)
		BAD("bad header (%u tokens, %u merges)", b->n, nm);
	if (rl_pretok_create((const char *)cp + o, pl, &b->pre, err, errlen))
		goto fail;
	o += pl;
	b->off = malloc(b->n * 4ull);
	b->len = malloc(b->n * 4ull);
	b->type = malloc(b->n);
	for (b->vmask = 1; b->vmask < 2 * b->n; b->vmask <<= 1)
		;
	b->vhash = calloc(b->vmask, 4);
	b->vmask--;
	if (!b->off || !b->len || !b->type || !b->vhash)
		BAD("out of memory");
	uint64_t dec_total = 0;
	for (uint32_t i = 0; i < b->n; i++) {
		uint32_t l;
		if (o + 5 > size)
			BAD("truncated at token %u", i);
		b->type[i] = cp[o];
		memcpy(&l, cp + o + 1, 4);
		o += 5;
		if (l > 65536 || l > size - o)
			BAD("token %u is %u bytes long", i, l);
		b->off[i] = (uint32_t)o;
		b->len[i] = l;
		dec_total += l;
		o += l;
		/* the last id of a text wins, as in llama.cpp's token_to_id */
		uint32_t s = fnv(cp + b->off[i], l) & b->vmask;
		while (b->vhash[s] && !(b->len[b->vhash[s] - 1] == l &&
					!memcmp(cp + b->off[b->vhash[s] - 1], cp + b->off[i], l)))
			s = (s + 1) & b->vmask;
		b->vhash[s] = i + 1;
	}
	/* merges: "left right" -> (rank, id of left+right); unusable ones are skipped */
	for (b->mmask = 1; b->mmask < 2 * (nm + 1); b->mmask <<= 1)
		;
	b->mkey = malloc(b->mmask * 8ull);
	b->mrank = calloc(b->mmask, 4);
	b->mres = malloc(b->mmask * 4ull);
	b->mmask--;
	b->nm = nm;
	b->spec_len = pl;
	b->moff = malloc((nm + 1) * 4ull);
	char *cat = malloc(2 * 65536 + 2);
	if (!b->mkey || !b->mrank || !b->mres || !b->moff || !cat) {
		free(cat);
		BAD("out of memory");
	}
	for (uint32_t i = 0; i < nm; i++) {
		uint32_t l;
		if (o + 4 > size || (memcpy(&l, cp + o, 4), l > size - o - 4) || l > 2 * 65536) {
			free(cat);
			BAD("truncated at merge %u", i);
		}
		/* "left right", split at the first space after the first byte (a left token
		 * may be a space itself in a UTF-8 vocabulary) */
		const char *m = (const char *)cp + o + 4, *sp = l > 1 ? memchr(m + 1, ' ', l - 1) : NULL;
		b->moff[i] = (uint32_t)o;
		o += 4 + l;
		if (!sp)
			continue;
		int32_t a = vfind(b, m, (size_t)(sp - m)), c = vfind(b, sp + 1, l - (size_t)(sp - m) - 1);
		memcpy(cat, m, (size_t)(sp - m));
		memcpy(cat + (sp - m), sp + 1, l - (size_t)(sp - m) - 1);
		int32_t r = vfind(b, cat, l - 1);
		uint32_t rk;
		int32_t rs;
		if (a < 0 || c < 0 || r < 0 || merge_find(b, a, c, &rk, &rs))
			continue;
		uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)c;
		uint32_t s = (uint32_t)mix(key) & b->mmask;
		while (b->mrank[s])
			s = (s + 1) & b->mmask;
		b->mkey[s] = key;
		b->mrank[s] = i + 1;
		b->mres[s] = (uint32_t)r;
	}
	free(cat);
	if (o != size)
		BAD("%zu stray bytes after the merges", size - o);
	/* byte symbols and every token's decoded bytes (code points back to bytes) */
	uint32_t cp_byte[512];
	memset(cp_byte, 0xff, sizeof cp_byte);
	for (int c = 0; c < 256; c++) {
		char u[8];
		snprintf(u, sizeof u, "<0x%02X>", c);
		b->byte_tok[c] = vfind(b, u, 6);
		uint32_t p = byte_cp((uint8_t)c);
		cp_byte[p] = (uint32_t)c;
		b->byte_u8n[c] = (uint8_t)utf8_put(p, u);
		memcpy(b->byte_u8[c], u, 2);
		b->byte_sym[c] = vfind(b, u, b->byte_u8n[c]);
	}
	b->dec = malloc(dec_total + 1);
	b->doff = malloc(b->n * 4ull);
	b->dlen = malloc(b->n * 4ull);
	if (!b->dec || !b->doff || !b->dlen)
		BAD("out of memory");
	uint32_t w = 0;
	for (uint32_t i = 0; i < b->n; i++) {
		const uint8_t *s = cp + b->off[i];
		b->doff[i] = w;
		if (b->type[i] == RL_TT_CONTROL || b->type[i] == RL_TT_USER) {
			memcpy(b->dec + w, s, b->len[i]);   /* added tokens are plain text */
			w += b->len[i];
		} else {
			for (size_t k = 0, kl; k < b->len[i]; k += kl) {
				uint32_t c = utf8_get(s + k, b->len[i] - k, &kl);
				if (c < 512 && cp_byte[c] != 0xffffffffu) {
					b->dec[w++] = (uint8_t)cp_byte[c];
				} else {           /* not a mapped code point: keep its bytes */
					memcpy(b->dec + w, s + k, kl);
					w += (uint32_t)kl;
				}
			}
		}
		b->dlen[i] = w - b->doff[i];
	}
	if (rl_specials_build(&b->specials, b->n, special_kind, special_text, b))
		BAD("out of memory");
	if (b->bos >= b->n)
		b->bos = UINT32_MAX;
	if (b->eos >= b->n)
		b->eos = UINT32_MAX;
	*out = b;
	return 0;
fail:
	rl_bpe_destroy(b);
	return -EINVAL;
}

void rl_bpe_destroy(struct rl_bpe *b)
{
	if (!b)
		return;
	rl_pretok_destroy(b->pre);
	rl_specials_free(&b->specials);
	free((void *)b->blob); free(b->off); free(b->len); free(b->type); free(b->dec);
	free(b->doff); free(b->dlen); free(b->vhash); free(b->mkey); free(b->mrank); free(b->mres);
	free(b->moff);
	free(b);
}

uint32_t rl_bpe_vocab_size(const struct rl_bpe *b) { return b->n; }
uint32_t rl_bpe_bos(const struct rl_bpe *b) { return b->bos; }
uint32_t rl_bpe_eos(const struct rl_bpe *b) { return b->eos; }

int rl_bpe_adds_bos(const struct rl_bpe *b)
{
	return !(b->flags & RL_BPE_NO_BOS);
}

int rl_bpe_adds_eos(const struct rl_bpe *b)
{
	return (b->flags & RL_BPE_ADD_EOS) != 0;
}

int rl_bpe_type(const struct rl_bpe *b, int32_t id) { return id >= 0 && (uint32_t)id < b->n ? b->type[id] : -1; }

int rl_bpe_special_kind(const struct rl_bpe *b, int32_t id)
{
	return id >= 0 && (uint32_t)id < b->n ? special_kind(b, (uint32_t)id) : -1;
}

const char *rl_bpe_piece(const struct rl_bpe *b, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= b->n)
		return NULL;
	*len = b->len[id];
	return (const char *)b->blob + b->off[id];
}

uint32_t rl_bpe_n_merges(const struct rl_bpe *b) { return b->nm; }

const char *rl_bpe_merge(const struct rl_bpe *b, uint32_t i, size_t *len)
{
	if (i >= b->nm)
		return NULL;
	uint32_t l;
	memcpy(&l, b->blob + b->moff[i], 4);
	*len = l;
	return (const char *)b->blob + b->moff[i] + 4;
}

const char *rl_bpe_spec(const struct rl_bpe *b, size_t *len)
{
	*len = b->spec_len;
	return (const char *)b->blob + 28;
}

uint32_t rl_bpe_flags(const struct rl_bpe *b) { return b->flags; }

const char *rl_bpe_decode(const struct rl_bpe *b, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= b->n)
		return NULL;
	*len = b->dlen[id];
	return (const char *)b->dec + b->doff[id];
}

struct out { const struct rl_bpe *b; int32_t *ids; size_t cap, n; int32_t *sym; size_t nsym; };
static void emit(struct out *o, int32_t id)
{
	if (o->n < o->cap)
		o->ids[o->n] = id;
	o->n++;
}

/* The initial symbols of a RL_BPE_RAW word: one token a UTF-8 char, else its bytes' <0xNN>
 * tokens; a char with neither stays as -1, which takes part in no merge and is dropped at the
 * end, as llama.cpp drops it. */
static size_t raw_symbols(const struct rl_bpe *b, const uint8_t *s, size_t n, int32_t *sym)
{
	size_t m = 0;
	for (size_t i = 0, k; i < n; i += k) {
		k = 1 + (s[i] >= 0xC0) + (s[i] >= 0xE0) + (s[i] >= 0xF0);
		if (k > n - i)
			k = n - i;
		int32_t id = vfind(b, (const char *)s + i, k);
		if (id >= 0) {
			sym[m++] = id;
			continue;
		}
		int any = 0;
		for (size_t j = 0; j < k; j++)
			if (b->byte_tok[s[i + j]] >= 0) {
				sym[m++] = b->byte_tok[s[i + j]];
				any = 1;
			}
		if (!any)
			sym[m++] = -1;
	}
	return m;
}

/* One word: its symbols merged lowest rank first (leftmost on ties). */
static int bpe_word(void *ctx, const uint8_t *s, size_t n)
{
	struct out *o = ctx;
	const struct rl_bpe *b = o->b;
	const int raw = b->flags & RL_BPE_RAW;
	if (!n)
		return 0;
	if (n > o->nsym) {             /* at most one symbol a byte */
		int32_t *t = realloc(o->sym, n * sizeof *t);
		if (!t)
			return -ENOMEM;
		o->sym = t;
		o->nsym = n;
	}
	int32_t *sym = o->sym;
	int whole = (b->flags & RL_BPE_IGNORE_MERGES) != 0;
	if (!whole && (b->flags & RL_BPE_NL_WHOLE)) {
		whole = 1;
		for (size_t i = 0; i < n && whole; i++)
			whole = s[i] == '\n';
	}
	if (whole) {
		/* the whole word as one token, when the vocabulary has it */
		char buf[1024];
		size_t k = 0;
		if (raw) {
			if (n <= sizeof buf)
				memcpy(buf, s, k = n);
		} else {
			for (size_t i = 0; i < n && k + 2 <= sizeof buf; i++) {
				memcpy(buf + k, b->byte_u8[s[i]], 2);
				k += b->byte_u8n[s[i]];
			}
		}
		int32_t id = n * 2 <= sizeof buf ? vfind(b, buf, k) : -1;
		if (id >= 0) {
			emit(o, id);
			return 0;
		}
	}
	size_t m = 0;
	if (raw)
		m = raw_symbols(b, s, n, sym);
	else
		for (size_t i = 0; i < n; i++)        /* a byte the vocabulary lacks: -1, as above */
			sym[m++] = b->byte_sym[s[i]];
	for (;;) {
		uint32_t best = UINT32_MAX, rk;
		size_t at = 0;
		int32_t res = -1, r;
		for (size_t i = 0; i + 1 < m; i++)
			if (sym[i] >= 0 && sym[i + 1] >= 0 && merge_find(b, sym[i], sym[i + 1], &rk, &r) && rk < best) {
				best = rk;
				at = i;
				res = r;
			}
		if (best == UINT32_MAX)
			break;
		sym[at] = res;
		memmove(sym + at + 1, sym + at + 2, (m - at - 2) * sizeof *sym);
		m--;
	}
	for (size_t i = 0; i < m; i++)
		if (sym[i] >= 0)
			emit(o, sym[i]);
	return 0;
}

/* Text between special tokens: spaces escaped where the vocabulary says, then words. */
static int text_words(struct out *o, const uint8_t *s, size_t n)
{
	const struct rl_bpe *b = o->b;
	if (!(b->flags & RL_BPE_ESCAPE_WS))
		return rl_pretok_split(b->pre, (const char *)s, n, bpe_word, o);
	size_t sp = 0;
	for (size_t i = 0; i < n; i++)
		sp += s[i] == ' ';
	uint8_t *e = malloc(n + 2 * sp + 1);
	if (!e)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ') {
			memcpy(e + k, "\xe2\x96\x81", 3);
			k += 3;
		} else {
			e[k++] = s[i];
		}
	}
	int rc = rl_pretok_split(b->pre, (const char *)e, k, bpe_word, o);
	free(e);
	return rc;
}

long rl_bpe_encode(const struct rl_bpe *b, const char *text, size_t len, int32_t bos_id, int special,
		   int32_t *ids, size_t cap)
{
	struct out o = { b, ids, cap, 0, NULL, 0 };
	struct rl_frag *f = NULL;
	long nf = rl_partition(&b->specials, text, len, special, &f);
	long rc = nf < 0 ? nf : 0;
	if (!rc && bos_id >= 0)
		emit(&o, bos_id);
	for (long i = 0; i < nf && !rc; i++) {
		if (f[i].tok >= 0)
			emit(&o, f[i].tok);
		else
			rc = text_words(&o, (const uint8_t *)text + f[i].off, f[i].len);
	}
	free(f);
	free(o.sym);
	return rc ? rc : (long)o.n;
}
