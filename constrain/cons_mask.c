/* cons_mask.c — the vocabulary as a byte trie, the compiled constraint's handle, and the
 * per-state token mask: the trie walked against the DFA, subtrees whose prefix leaves the
 * language skipped whole, masks cached per DFA state (LRU, bounded bytes).
 *
 * A state inside a JSON string allows nearly the whole vocabulary, so its walk visits nearly
 * every node: the p99 of a mask. The vocabulary therefore also keeps its plain tokens (whole
 * UTF-8 characters, none of them '"', '\' or a control character; at most PLAIN_MAX
 * characters) as bitmasks by character count, and a second trie of the other tokens. Where
 * every plain character leads a state to one same state (checked on the automaton: printable
 * ASCII, then each well-formed multi-byte sequence), and so on for J steps (a string with
 * room for J more characters; J unbounded once a state leads to itself), a plain token is
 * allowed exactly when it has at most J characters: the mask is that bitmask plus the walk of
 * the second trie alone. The same mask (the tests hold it to every token's bytes run through
 * the automaton) for a fraction of the walk.
 *
 * The trie is laid out in preorder, one record a node (its byte, its depth, the index just past
 * its subtree, the tokens that end there), so the walk is one forward pass over an array that
 * jumps past every dead subtree: its cost follows the live part of the vocabulary, not its
 * size. A node's tokens are a run of the ids sorted by bytes (several ids can share bytes:
 * a SentencePiece byte piece and a one-character piece). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "constrain/cons_internal.h"
#include "constrain/rl_cons.h"
#include "tokenizer/rl_bpe.h"
#include "tokenizer/rl_tok.h"

struct tnode {
	uint32_t skip;                 /* index past this node's subtree */
	uint32_t tok;                  /* first of its tokens in vocab->sorted */
	uint16_t ntok, depth;          /* depth: 1 for a first byte */
	uint8_t  byte;
};

/* the most characters a plain token has; longer ones go with the rest */
#define PLAIN_MAX 32

/* a preorder trie over some of the text tokens */
struct trie {
	uint32_t *sorted;              /* its tokens by bytes */
	struct tnode *node;
	uint32_t nnode, max_depth;
};

struct rl_cons_vocab {
	uint32_t n;
	char *bytes;                   /* every allowed token's bytes, back to back */
	uint64_t *off;                 /* [n + 1] */
	uint8_t *kind;                 /* [n] 0 text, 1 never allowed, 2 end of generation */
	struct trie all;               /* every text token */
	struct trie rest;              /* the text tokens that are not plain */
	uint32_t *plain;               /* [(PLAIN_MAX + 1) * words]: the plain tokens of <= L characters
					* at [L * words], L = 0..PLAIN_MAX */
	uint32_t nplain[PLAIN_MAX + 1];  /* how many of them */
	uint32_t *eog, neog;           /* the end-of-generation ids, so accepting states need no scan */
};

enum { K_TEXT, K_NEVER, K_EOG };

uint32_t rl_cons_vocab_size(const struct rl_cons_vocab *v) { return v->n; }

const char *rl_cons_vocab_bytes(const struct rl_cons_vocab *v, uint32_t id, uint32_t *len)
{
	if (id >= v->n || v->kind[id] != K_TEXT)
		return NULL;
	*len = (uint32_t)(v->off[id + 1] - v->off[id]);
	return v->bytes + v->off[id];
}

int rl_cons_vocab_is_eog(const struct rl_cons_vocab *v, uint32_t id) { return id < v->n && v->kind[id] == K_EOG; }

void rl_cons_vocab_destroy(struct rl_cons_vocab *v)
{
	if (!v)
		return;
	free(v->bytes);
	free(v->off);
	free(v->kind);
	free(v->all.sorted);
	free(v->all.node);
	free(v->rest.sorted);
	free(v->rest.node);
	free(v->plain);
	free(v->eog);
	free(v);
}

static const struct rl_cons_vocab *sort_v;
static int by_bytes(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	uint64_t la = sort_v->off[a + 1] - sort_v->off[a], lb = sort_v->off[b + 1] - sort_v->off[b];
	int c = memcmp(sort_v->bytes + sort_v->off[a], sort_v->bytes + sort_v->off[b], la < lb ? la : lb);
	if (c)
		return c;
	if (la != lb)
		return la < lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* The number of characters when the bytes are whole, well-formed UTF-8 characters (Unicode's
 * table 3-7), none of them '"', '\\', a C0 control or DEL: what a JSON string's body (and most
 * text states) take as they come; else -1 */
static int plain_chars(const uint8_t *b, uint64_t n)
{
	int chars = 0;
	for (uint64_t i = 0; i < n; chars++) {
		const uint8_t c = b[i];
		if (c < 0x80) {
			if (c < 0x20 || c == 0x7F || c == '"' || c == '\\')
				return -1;
			i++;
			continue;
		}
		uint8_t lo = 0x80, hi = 0xBF;          /* the first continuation byte's range */
		int more;
		if (c >= 0xC2 && c <= 0xDF) more = 1;
		else if (c >= 0xE0 && c <= 0xEF) { more = 2; lo = c == 0xE0 ? 0xA0 : 0x80; hi = c == 0xED ? 0x9F : 0xBF; }
		else if (c >= 0xF0 && c <= 0xF4) { more = 3; lo = c == 0xF0 ? 0x90 : 0x80; hi = c == 0xF4 ? 0x8F : 0xBF; }
		else return -1;
		if (n - i <= (uint64_t)more || b[i + 1] < lo || b[i + 1] > hi)
			return -1;
		for (int k = 2; k <= more; k++)
			if (b[i + k] < 0x80 || b[i + k] > 0xBF)
				return -1;
		i += (uint64_t)more + 1;
	}
	return chars;
}

/* the sorted ids of the text tokens that in[] keeps (all when NULL) and the preorder trie
 * over them */
static int build_trie(const struct rl_cons_vocab *v, const uint8_t *in, struct trie *tr)
{
	uint32_t nt = 0;
	uint64_t total = 0;
	for (uint32_t i = 0; i < v->n; i++)
		if (v->kind[i] == K_TEXT && (!in || in[i])) {
			nt++;
			total += v->off[i + 1] - v->off[i];
		}
	tr->sorted = malloc((nt ? nt : 1) * sizeof *tr->sorted);
	tr->node = malloc((total ? total : 1) * sizeof *tr->node);
	uint32_t *path = malloc(65536 * sizeof *path);
	if (!tr->sorted || !tr->node || !path) {
		free(path);
		return -ENOMEM;
	}
	nt = 0;
	for (uint32_t i = 0; i < v->n; i++)
		if (v->kind[i] == K_TEXT && (!in || in[i]))
			tr->sorted[nt++] = i;
	sort_v = v;                            /* qsort has no context argument in C11 */
	qsort(tr->sorted, nt, sizeof *tr->sorted, by_bytes);
	uint32_t depth = 0, nn = 0;            /* path[d - 1]: the node at depth d on the current path */
	const char *prev = NULL;
	uint64_t plen = 0;
	for (uint32_t k = 0; k < nt; k++) {
		uint32_t id = tr->sorted[k];
		const char *s = v->bytes + v->off[id];
		uint64_t len = v->off[id + 1] - v->off[id], lcp = 0;
		while (prev && lcp < len && lcp < plen && s[lcp] == prev[lcp])
			lcp++;
		if (prev && lcp == len && len == plen) {   /* the same bytes: the same node */
			tr->node[path[depth - 1]].ntok++;
			continue;
		}
		while (depth > lcp) {              /* close the subtrees the path leaves */
			tr->node[path[depth - 1]].skip = nn;
			depth--;
		}
		for (uint64_t j = lcp; j < len; j++) {
			struct tnode *x = &tr->node[nn];
			x->byte = (uint8_t)s[j];
			x->depth = (uint16_t)(j + 1);
			x->ntok = 0;
			x->tok = k;
			x->skip = 0;
			path[depth++] = nn++;
		}
		struct tnode *last = &tr->node[path[depth - 1]];
		last->tok = k;
		last->ntok = 1;
		if (depth > tr->max_depth)
			tr->max_depth = depth;
		prev = s;
		plen = len;
	}
	while (depth) {
		tr->node[path[depth - 1]].skip = nn;
		depth--;
	}
	tr->nnode = nn;
	free(path);
	return 0;
}

int rl_cons_vocab_create(uint32_t n, const char *const *tok, const uint32_t *len, const uint8_t *special,
			 const uint32_t *eog, size_t n_eog, struct rl_cons_vocab **out)
{
	struct rl_cons_vocab *v = calloc(1, sizeof *v);
	if (!v)
		return -ENOMEM;
	v->n = n;
	v->off = malloc(((size_t)n + 1) * sizeof *v->off);
	v->kind = calloc(n ? n : 1, 1);
	uint64_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += tok[i] ? len[i] : 0;
	v->bytes = malloc(total ? total : 1);
	if (!v->off || !v->kind || !v->bytes) {
		rl_cons_vocab_destroy(v);
		return -ENOMEM;
	}
	v->eog = malloc((n_eog ? n_eog : 1) * sizeof *v->eog);
	if (!v->eog) {
		rl_cons_vocab_destroy(v);
		return -ENOMEM;
	}
	for (size_t e = 0; e < n_eog; e++)
		if (eog[e] < n && v->kind[eog[e]] != K_EOG) {
			v->kind[eog[e]] = K_EOG;
			v->eog[v->neog++] = eog[e];
		}
	uint64_t o = 0;
	for (uint32_t i = 0; i < n; i++) {
		v->off[i] = o;
		if (v->kind[i] == K_EOG)
			continue;
		if (!tok[i] || (special && special[i])) {
			v->kind[i] = K_NEVER;
			continue;
		}
		memcpy(v->bytes + o, tok[i], len[i]);
		o += len[i];
	}
	v->off[n] = o;
	/* the plain tokens: their bitmasks by characters, and the trie of the others */
	const size_t words = ((size_t)n + 31) / 32;
	uint8_t *other = calloc(n ? n : 1, 1);
	v->plain = calloc((PLAIN_MAX + 1) * words + 1, 4);
	int rc = other && v->plain ? 0 : -ENOMEM;
	for (uint32_t i = 0; i < n && !rc; i++) {
		if (v->kind[i] == K_TEXT && (v->off[i + 1] == v->off[i] || v->off[i + 1] - v->off[i] >= 65535))
			v->kind[i] = K_NEVER;   /* no bytes (or absurdly many): never a useful step */
		if (v->kind[i] != K_TEXT)
			continue;
		const int ch = plain_chars((const uint8_t *)v->bytes + v->off[i], v->off[i + 1] - v->off[i]);
		if (ch < 1 || ch > PLAIN_MAX) {
			other[i] = 1;
			continue;
		}
		v->plain[ch * words + (i >> 5)] |= 1u << (i & 31);   /* by exact count first */
		v->nplain[ch]++;
	}
	for (int L = 1; L <= PLAIN_MAX && !rc; L++) {            /* then <= L: each adds the last */
		for (size_t w = 0; w < words; w++)
			v->plain[L * words + w] |= v->plain[(L - 1) * words + w];
		v->nplain[L] += v->nplain[L - 1];
	}
	if (!rc)
		rc = build_trie(v, NULL, &v->all);
	if (!rc)
		rc = build_trie(v, other, &v->rest);
	free(other);
	if (rc) {
		rl_cons_vocab_destroy(v);
		return rc;
	}
	*out = v;
	return 0;
}

int rl_cons_vocab_from_tok(const struct rl_tok *t, struct rl_cons_vocab **out)
{
	uint32_t n = rl_tok_vocab_size(t);
	const char **tok = calloc(n ? n : 1, sizeof *tok);
	uint32_t *len = calloc(n ? n : 1, sizeof *len);
	uint8_t *special = calloc(n ? n : 1, 1);
	/* the count first (EOS itself is only counted where there is room for it) */
	uint32_t probe[64];
	size_t n_eog = rl_tok_eog_ids(t, probe, 64);
	uint32_t *eog = malloc((n_eog ? n_eog : 1) * sizeof *eog);
	int rc = -ENOMEM;
	if (tok && len && special && eog) {
		rl_tok_eog_ids(t, eog, n_eog);
		for (uint32_t i = 0; i < n; i++) {
			int ty = rl_tok_type(t, (int32_t)i);
			/* control, unknown and unused pieces are no text the output may hold; user-defined
			 * ones (Gemma's whitespace runs, SmolLM2's ...) are plain text */
			if (ty == RL_TT_CONTROL || ty == RL_TT_UNKNOWN || ty == RL_TT_UNUSED) {
				special[i] = 1;
				continue;
			}
			size_t l = 0;
			/* rl_tok_decode gives the bytes: byte-level BPE unmapped from GPT-2's code
			 * points, SentencePiece's U+2581 already a space in the blob, <0xNN> as the byte */
			tok[i] = rl_tok_decode(t, -1, (int32_t)i, &l);
			len[i] = (uint32_t)l;
		}
		rc = rl_cons_vocab_create(n, tok, len, special, eog, n_eog, out);
	}
	free(tok);
	free(len);
	free(special);
	free(eog);
	return rc;
}

/* ---- the compiled constraint ------------------------------------------------------------ */
struct centry { uint32_t state; int32_t prev, next; long count; uint32_t *mask; };

struct rl_cons {
	const struct rl_cons_vocab *v;
	struct rl_cons_dfa d;          /* a grammar's grows as its states are met (cons_gram.c) */
	struct rl_cons_gram *g;        /* NULL: d is a whole DFA */
	uint32_t *dist;                /* a DFA's fewest bytes to a match per state, on first use */
	size_t words;
	int32_t *slot;                 /* [nslot] cache entry of a state, -1 none */
	uint32_t nslot;
	struct centry *e;
	uint32_t ne, maxe;
	int32_t head, tail;            /* most and least recently used */
	uint64_t hits, misses;
	uint32_t *stack;               /* [max_depth + 1] the walk's state per depth */
	uint64_t plain_masks;          /* masks made as the plain tokens plus the rest's walk */
};

uint64_t rl_cons_plain_masks(const struct rl_cons *c) { return c->plain_masks; }

int rl_cons_from_dfa(const struct rl_cons_vocab *v, struct rl_cons_dfa *d, const struct rl_cons_opts *opts,
		     struct rl_cons **out)
{
	struct rl_cons *c = calloc(1, sizeof *c);
	if (!c) {
		rl_cons_dfa_free(d);
		return -ENOMEM;
	}
	c->v = v;
	c->d = *d;
	memset(d, 0, sizeof *d);
	c->words = ((size_t)v->n + 31) / 32;
	size_t budget = opts && opts->cache_bytes ? opts->cache_bytes : (size_t)64 << 20;
	size_t per = c->words ? c->words * 4 : 4;   /* the masks' bytes (an empty vocabulary: none) */
	size_t maxe = budget / per;
	c->maxe = (uint32_t)(maxe < c->d.n ? maxe : c->d.n);
	c->nslot = c->d.n;
	c->slot = malloc(c->d.n * sizeof *c->slot);
	c->e = calloc(c->maxe ? c->maxe : 1, sizeof *c->e);
	c->stack = malloc(((size_t)v->all.max_depth + 1) * sizeof *c->stack);
	if (!c->slot || !c->e || !c->stack) {
		rl_cons_destroy(c);
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < c->d.n; s++)
		c->slot[s] = -1;
	c->head = c->tail = -1;
	*out = c;
	return 0;
}

void rl_cons_destroy(struct rl_cons *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->ne; i++)
		free(c->e[i].mask);
	free(c->e);
	free(c->slot);
	free(c->stack);
	free(c->dist);
	rl_cons_dfa_free(&c->d);
	rl_cons_gram_free(c->g);
	free(c);
}

/* A handle over a grammar (taken over; freed on failure): its table starts with the dead and
 * the start state and grows; the mask cache is bounded by bytes alone. */
static int from_gram(const struct rl_cons_vocab *v, struct rl_cons_gram *g, const struct rl_cons_opts *opts,
		     struct rl_cons **out)
{
	struct rl_cons_dfa d;
	int rc = rl_cons_gram_init(g, &d);
	if (rc) {
		rl_cons_dfa_free(&d);
		rl_cons_gram_free(g);
		return rc;
	}
	if ((rc = rl_cons_from_dfa(v, &d, opts, out))) {
		rl_cons_gram_free(g);
		return rc;
	}
	struct rl_cons *c = *out;
	c->g = g;
	size_t budget = opts && opts->cache_bytes ? opts->cache_bytes : (size_t)64 << 20;
	size_t maxe = budget / (c->words ? c->words * 4 : 4), cap = opts && opts->max_states ? opts->max_states : 100000;
	c->maxe = (uint32_t)(maxe < cap ? maxe : cap);
	struct centry *e = realloc(c->e, (c->maxe ? c->maxe : 1) * sizeof *e);
	if (!e) {
		rl_cons_destroy(c);
		return -ENOMEM;
	}
	c->e = e;
	return 0;
}

int rl_cons_compile_rules(const struct rl_cons_vocab *v, const struct rl_cons_rules *r, unsigned pflags,
			  const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen)
{
	struct rl_cons_gram *g;
	struct rl_cons_dfa d;
	int rc = rl_cons_gram_build(r, pflags, opts ? opts->max_states : 0, &g, &d, err, errlen);
	if (rc)
		return rc;
	return g ? from_gram(v, g, opts, out) : rl_cons_from_dfa(v, &d, opts, out);
}

int rl_cons_compile_gbnf(const struct rl_cons_vocab *v, const char *text, size_t len, const struct rl_cons_opts *opts,
			 struct rl_cons **out, char *err, size_t errlen)
{
	struct rl_cons_rules r = { 0 };
	int rc = rl_cons_gbnf_rules(text, len, &r, err, errlen);
	if (!rc)
		rc = rl_cons_compile_rules(v, &r, 0, opts, out, err, errlen);
	rl_cons_rules_free(&r);
	return rc;
}

int rl_cons_is_grammar(const struct rl_cons *c) { return c->g != NULL; }

/* the state after byte b: the table's entry, computed first when a grammar has none yet */
static inline uint32_t cstep(struct rl_cons *c, uint32_t s, uint8_t b)
{
	uint32_t t = c->d.next[(size_t)s * c->d.ncls + c->d.cls[b]];
	return t != RL_GRAM_UNKNOWN ? t : rl_cons_gram_fill(c->g, &c->d, s, b);
}

int rl_cons_compile_regex(const struct rl_cons_vocab *v, const char *re, size_t len,
			  const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen)
{
	struct rl_cons_dfa d;
	int rc = rl_cons_regex_dfa(re, len, 0, opts ? opts->max_states : 0, &d, err, errlen);
	if (rc)
		return rc;
	return rl_cons_from_dfa(v, &d, opts, out);
}

uint32_t rl_cons_start(const struct rl_cons *c) { return c->d.start; }
uint32_t rl_cons_n_states(const struct rl_cons *c) { return c->d.n; }
size_t rl_cons_mask_words(const struct rl_cons *c) { return c->words; }
int rl_cons_accepting(const struct rl_cons *c, uint32_t s) { return s < c->d.n && c->d.accept[s]; }
int rl_cons_can_continue(const struct rl_cons *c, uint32_t s) { return s < c->d.n && c->d.cont[s]; }

uint32_t rl_cons_feed(struct rl_cons *c, uint32_t s, const void *bytes, size_t n)
{
	const uint8_t *b = bytes;
	if (s >= c->d.n)
		return RL_CONS_DEAD;
	for (size_t i = 0; i < n && s; i++)
		s = cstep(c, s, b[i]);
	return s;
}

long rl_cons_advance(struct rl_cons *c, uint32_t s, uint32_t id)
{
	if (s >= c->d.n || s == RL_CONS_DEAD || id >= c->v->n)
		return -EINVAL;
	if (c->v->kind[id] == K_EOG)
		return c->d.accept[s] ? (long)s : -EINVAL;
	uint32_t len;
	const char *b = rl_cons_vocab_bytes(c->v, id, &len);
	if (!b)
		return -EINVAL;
	uint32_t t = rl_cons_feed(c, s, b, len);
	return t ? (long)t : c->g && rl_cons_gram_error(c->g) ? rl_cons_gram_error(c->g) : -EINVAL;
}

int rl_cons_error(const struct rl_cons *c) { return c->g ? rl_cons_gram_error(c->g) : 0; }

/* The state every plain character (plain_chars) leads s to: RL_CONS_DEAD when each of them
 * leaves the language, PLAIN_PART when they part (or the search outgrows a small bound; the
 * full walk is then the answer, never a wrong one). Each printable ASCII byte, then each
 * well-formed multi-byte sequence followed through the automaton as pairs (bytes still to
 * come, state), each pair expanded once; bytes of one class (the same transitions) once. */
#define PLAIN_PART UINT32_MAX
static uint32_t plain_next(struct rl_cons *c, uint32_t s)
{
	uint32_t to = PLAIN_PART;              /* the common target, once one character is in */
	uint8_t seen[256] = { 0 };
#define PLAIN_TO(t) do { if (to == PLAIN_PART) to = (t); else if (to != (t)) return PLAIN_PART; } while (0)
	for (unsigned b = 0x20; b < 0x7F; b++)
		if (b != '"' && b != '\\' && !seen[c->d.cls[b]]) {
			seen[c->d.cls[b]] = 1;
			PLAIN_TO(cstep(c, s, (uint8_t)b));
		}
	/* a pair's kind: 1..3 continuation bytes of 80..BF to come, or 4..7 the first of them
	 * narrowed after E0 (A0..BF, then 1 more), ED (80..9F, 1 more), F0 (90..BF, 2 more),
	 * F4 (80..8F, 2 more). A dead pair is a character that leaves the language. */
	static const uint8_t lo[8] = { 0, 0x80, 0x80, 0x80, 0xA0, 0x80, 0x90, 0x80 };
	static const uint8_t hi[8] = { 0, 0xBF, 0xBF, 0xBF, 0xBF, 0x9F, 0xBF, 0x8F };
	static const uint8_t after[8] = { 0, 0, 1, 2, 1, 1, 2, 2 };   /* the kind once one byte is in */
	enum { MAXP = 64 };
	uint8_t pk[MAXP];
	uint32_t ps[MAXP], np = 0;
#define PLAIN_PAIR(k, t) do { \
		uint32_t q_ = 0; \
		while (q_ < np && (pk[q_] != (k) || ps[q_] != (t))) \
			q_++; \
		if (q_ == np) { \
			if (np == MAXP) \
				return PLAIN_PART; \
			pk[np] = (k); \
			ps[np++] = (t); \
		} \
	} while (0)
	for (unsigned b = 0xC2; b <= 0xF4; b++) {
		const uint8_t k = b <= 0xDF ? 1 : b == 0xE0 ? 4 : b == 0xED ? 5 : b <= 0xEF ? 2 : b == 0xF0 ? 6 : b == 0xF4 ? 7 : 3;
		const uint32_t t = cstep(c, s, (uint8_t)b);
		if (!t)
			PLAIN_TO(RL_CONS_DEAD);
		else
			PLAIN_PAIR(k, t);
	}
	for (uint32_t q = 0; q < np; q++) {          /* np grows as pairs are found */
		uint8_t done[256] = { 0 };
		const uint8_t k = after[pk[q]];
		for (unsigned b = lo[pk[q]]; b <= hi[pk[q]]; b++) {
			if (done[c->d.cls[b]])
				continue;
			done[c->d.cls[b]] = 1;
			const uint32_t t = cstep(c, ps[q], (uint8_t)b);
			if (!k || !t)
				PLAIN_TO(t);
			else
				PLAIN_PAIR(k, t);
		}
	}
#undef PLAIN_PAIR
#undef PLAIN_TO
	return to;
}

/* J: the most plain characters a token may have from s (PLAIN_MAX for any), -1 when the plain
 * characters part somewhere along the way */
static int plain_room(struct rl_cons *c, uint32_t s)
{
	uint32_t cur = s;
	for (int j = 0; j < PLAIN_MAX; j++) {
		const uint32_t nx = plain_next(c, cur);
		if (nx == PLAIN_PART)
			return -1;
		if (nx == RL_CONS_DEAD)
			return j;
		if (nx == cur)                 /* it leads to itself: any number more */
			return PLAIN_MAX;
		cur = nx;
	}
	return PLAIN_MAX;
}

/* the tokens of trie tr that lead from state s to a live state, into mask; with seen (the
 * prewarm's), each state a token ends in that seen does not mark yet is marked and appended to
 * queue[*qn] (the calls with NULL are specialised without it) */
static inline __attribute__((always_inline)) long walk_impl(struct rl_cons *c, const struct trie *tr, uint32_t s,
							     uint32_t *mask, uint8_t *seen, uint32_t *queue, uint32_t *qn)
{
	const struct tnode *node = tr->node;
	const uint32_t *sorted = tr->sorted, *next = c->d.next;   /* re-read after a grammar's fill */
	const uint8_t *cls = c->d.cls;
	const uint32_t ncls = c->d.ncls;
	uint32_t *st = c->stack;
	long count = 0;
	st[0] = s;
	for (uint32_t i = 0, nn = tr->nnode; i < nn;) {
		const struct tnode *x = &node[i];
		uint32_t t = next[(size_t)st[x->depth - 1] * ncls + cls[x->byte]];
		if (t == RL_GRAM_UNKNOWN) {
			t = rl_cons_gram_fill(c->g, &c->d, st[x->depth - 1], x->byte);
			next = c->d.next;
		}
		if (!t) {                          /* the prefix leaves the language: skip its subtree */
			i = x->skip;
			continue;
		}
		st[x->depth] = t;
		if (seen && x->ntok && !seen[t]) {
			seen[t] = 1;
			queue[(*qn)++] = t;
		}
		for (uint32_t k = 0; k < x->ntok; k++) {
			uint32_t id = sorted[x->tok + k];
			mask[id >> 5] |= 1u << (id & 31);
		}
		count += x->ntok;
		i++;
	}
	return count;
}

static long walk(struct rl_cons *c, const struct trie *tr, uint32_t s, uint32_t *mask)
{
	return walk_impl(c, tr, s, mask, NULL, NULL, NULL);
}

long rl_cons_mask_nocache(struct rl_cons *c, uint32_t s, uint32_t *mask)
{
	memset(mask, 0, c->words * 4);
	if (s == RL_CONS_DEAD || s >= c->d.n)
		return 0;
	const struct rl_cons_vocab *v = c->v;
	long count;
	const int J = v->nplain[PLAIN_MAX] ? plain_room(c, s) : -1;
	if (J >= 0) {
		memcpy(mask, v->plain + (size_t)J * c->words, c->words * 4);
		count = v->nplain[J] + walk(c, &v->rest, s, mask);
		c->plain_masks++;
	} else
		count = walk(c, &v->all, s, mask);
	if (c->d.accept[s])                    /* (a grammar's table may have moved) */
		for (uint32_t e = 0; e < v->neog; e++) {
			uint32_t id = v->eog[e];
			mask[id >> 5] |= 1u << (id & 31);
			count++;
		}
	return count;
}

static void lru_unlink(struct rl_cons *c, int32_t i)
{
	struct centry *e = &c->e[i];
	if (e->prev >= 0)
		c->e[e->prev].next = e->next;
	else
		c->head = e->next;
	if (e->next >= 0)
		c->e[e->next].prev = e->prev;
	else
		c->tail = e->prev;
}
static void lru_front(struct rl_cons *c, int32_t i)
{
	c->e[i].prev = -1;
	c->e[i].next = c->head;
	if (c->head >= 0)
		c->e[c->head].prev = i;
	c->head = i;
	if (c->tail < 0)
		c->tail = i;
}

long rl_cons_mask(struct rl_cons *c, uint32_t s, uint32_t *mask)
{
	if (s == RL_CONS_DEAD || s >= c->d.n || !c->maxe)
		return rl_cons_mask_nocache(c, s, mask);
	if (s >= c->nslot) {                   /* a grammar's state met since */
		uint32_t ns = c->d.n > 2 * c->nslot ? c->d.n : 2 * c->nslot;
		int32_t *sl = realloc(c->slot, ns * sizeof *sl);
		if (!sl)
			return rl_cons_mask_nocache(c, s, mask);
		for (uint32_t q = c->nslot; q < ns; q++)
			sl[q] = -1;
		c->slot = sl;
		c->nslot = ns;
	}
	int32_t i = c->slot[s];
	if (i >= 0) {
		c->hits++;
		memcpy(mask, c->e[i].mask, c->words * 4);
		if (c->head != i) {
			lru_unlink(c, i);
			lru_front(c, i);
		}
		return c->e[i].count;
	}
	c->misses++;
	long n = rl_cons_mask_nocache(c, s, mask);
	if (c->ne < c->maxe) {                 /* a new entry */
		uint32_t *m = malloc(c->words * 4);
		if (!m)
			return n;                  /* no room: uncached, still correct */
		i = (int32_t)c->ne++;
		c->e[i].mask = m;
	} else {                               /* the least recently used one */
		i = c->tail;
		lru_unlink(c, i);
		c->slot[c->e[i].state] = -1;
	}
	c->e[i].state = s;
	c->e[i].count = n;
	memcpy(c->e[i].mask, mask, c->words * 4);
	c->slot[s] = i;
	lru_front(c, i);
	return n;
}

static uint64_t thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t rl_cons_prewarm(struct rl_cons *c, uint64_t budget_ns)
{
	if (c->g || !c->maxe)
		return 0;
	const uint64_t t0 = thread_ns();
	uint32_t *queue = malloc((size_t)c->d.n * sizeof *queue), *m = malloc(c->words * 4), qn = 0, done = 0;
	uint8_t *seen = calloc(c->d.n, 1);
	if (queue && m && seen) {
		seen[RL_CONS_DEAD] = 1;
		seen[c->d.start] = 1;
		queue[qn++] = c->d.start;
		/* the cache keeps them all: never past its size, which would evict the start's */
		for (uint32_t q = 0; q < qn && c->ne < c->maxe && thread_ns() - t0 < budget_ns; q++, done++) {
			rl_cons_mask(c, queue[q], m);
			walk_impl(c, &c->v->all, queue[q], m, seen, queue, &qn);   /* the states its tokens reach */
		}
	}
	free(queue);
	free(m);
	free(seen);
	return done;
}

void rl_cons_cache_stats(const struct rl_cons *c, uint64_t *hits, uint64_t *misses, size_t *bytes)
{
	if (hits)
		*hits = c->hits;
	if (misses)
		*misses = c->misses;
	if (bytes)
		*bytes = (size_t)c->ne * c->words * 4;
}

/* every state's distance to an accepting one: a breadth-first search from the accepting
 * states over the reversed transitions (one edge a byte class) */
static uint32_t *dist_table(const struct rl_cons *c)
{
	const uint32_t n = c->d.n, ncls = c->d.ncls;
	uint32_t *d = malloc(n * sizeof *d), *start = calloc((size_t)n + 1, sizeof *start);
	uint32_t *from = malloc(((size_t)n * ncls + 1) * sizeof *from), *queue = malloc(((size_t)n + 1) * sizeof *queue);
	if (!d || !start || !from || !queue) {
		free(d); free(start); free(from); free(queue);
		return NULL;
	}
	for (uint32_t s = 1; s < n; s++)
		for (uint32_t k = 0; k < ncls; k++)
			start[c->d.next[(size_t)s * ncls + k]]++;
	for (uint32_t t = 0, sum = 0; t <= n; t++) {   /* counts to starts */
		const uint32_t x = t < n ? start[t] : 0;
		start[t] = sum;
		sum += x;
	}
	for (uint32_t s = 1; s < n; s++)
		for (uint32_t k = 0; k < ncls; k++) {
			const uint32_t t = c->d.next[(size_t)s * ncls + k];
			from[start[t]++] = s;
		}
	for (uint32_t t = n; t > 0; t--)            /* starts again, shifted back */
		start[t] = start[t - 1];
	start[0] = 0;
	uint32_t qh = 0, qt = 0;
	for (uint32_t s = 0; s < n; s++) {
		d[s] = s && c->d.accept[s] ? 0 : UINT32_MAX;
		if (!d[s])
			queue[qt++] = s;
	}
	while (qh < qt) {
		const uint32_t t = queue[qh++];
		for (uint32_t e = start[t]; e < start[t + 1]; e++)
			if (d[from[e]] == UINT32_MAX) {
				d[from[e]] = d[t] + 1;
				queue[qt++] = from[e];
			}
	}
	free(start); free(from); free(queue);
	return d;
}

uint32_t rl_cons_dist(struct rl_cons *c, uint32_t s)
{
	if (c->g)
		return rl_cons_gram_dist(c->g, s);
	if (s >= c->d.n)
		return UINT32_MAX;
	if (!c->dist && !(c->dist = dist_table(c)))
		return UINT32_MAX;
	return c->dist[s];
}

long rl_cons_vocab_longest(const struct rl_cons_vocab *v, const void *bytes, size_t n, uint32_t *len, int *longer)
{
	const uint8_t *b = bytes;
	long best = -1;
	uint32_t i = 0, d = 0;
	/* down the preorder trie: a node's children follow it, its next sibling is at its skip */
	while (i < v->all.nnode && d < n) {
		const struct tnode *x = &v->all.node[i];
		if (x->depth != d + 1)         /* past the last child of the node matched so far */
			break;
		if (x->byte != b[d]) {
			i = x->skip;
			continue;
		}
		d++;
		if (x->ntok) {
			best = (long)v->all.sorted[x->tok];
			*len = d;
		}
		i++;
	}
	/* all n bytes matched and the node has a child: tokens go on past them */
	*longer = d == n && n && i < v->all.nnode && v->all.node[i].depth == d + 1;
	return best;
}

size_t rl_cons_forced(struct rl_cons *c, uint32_t s, char *out, size_t cap)
{
	size_t n = 0;
	if (c->g)                              /* a grammar's states are made as reached: none forced */
		return 0;
	while (n < cap && s && s < c->d.n && !c->d.accept[s]) {
		uint32_t next = RL_CONS_DEAD;
		int only = -1;
		for (int b = 0; b < 256; b++) {
			const uint32_t t = rl_cons_dfa_step(&c->d, s, (uint8_t)b);
			if (!t)
				continue;
			if (only >= 0)
				return n;              /* a choice: nothing beyond it is forced */
			only = b;
			next = t;
		}
		if (only < 0)
			break;
		out[n++] = (char)only;
		s = next;
	}
	return n;
}
