/* rl_rt_cons.c — the runtime's constraints (see rl_rt_cons.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/loop/rl_rt_cons.h"
#include "constrain/rl_cons.h"
#include "ipc/rl_wire.h"
#include "tokenizer/rl_tok.h"

struct handle {
	struct rl_cons *c;             /* NULL: a free entry */
	int      kind;
	char    *text;
	size_t   len;
	uint32_t users;                /* live sequences under it */
	uint64_t last;                 /* use counter at its last start: the LRU's order */
};

struct seq {
	int      h;                    /* its handle, -1 when unconstrained */
	uint32_t state;
	uint32_t *mask;                /* [1 + max_draft][mask words]: the state's, then after each draft */
};

struct rl_rt_cons {
	const void *blob;
	size_t   blob_bytes;
	struct rl_cons_vocab *v;       /* built at the first constrained request */
	struct handle h[RL_RT_CONS_HANDLES];
	uint64_t uses;
	struct seq *seq;               /* [pool_size] */
	uint32_t pool_size, max_draft;
	uint32_t max_states;           /* each handle's automaton cap (0: the engine's default) */
};

int rl_rt_cons_create(const void *vocab_blob, size_t vocab_bytes, uint32_t pool_size, uint32_t max_draft,
		      uint32_t max_states, struct rl_rt_cons **out)
{
	struct rl_rt_cons *k = calloc(1, sizeof *k);
	if (!k || !(k->seq = calloc(pool_size, sizeof *k->seq))) {
		free(k);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < pool_size; i++)
		k->seq[i].h = -1;
	k->blob = vocab_blob;
	k->blob_bytes = vocab_bytes;
	k->pool_size = pool_size;
	k->max_draft = max_draft;
	k->max_states = max_states;
	*out = k;
	return 0;
}

void rl_rt_cons_destroy(struct rl_rt_cons *k)
{
	if (!k)
		return;
	for (uint32_t i = 0; i < k->pool_size; i++)
		free(k->seq[i].mask);
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		rl_cons_destroy(k->h[i].c);
		free(k->h[i].text);
	}
	rl_cons_vocab_destroy(k->v);
	free(k->seq);
	free(k);
}

static int vocab(struct rl_rt_cons *k)
{
	if (k->v)
		return 0;
	if (!k->blob)
		return -ENOTSUP;
	struct rl_tok *t;
	char err[160];
	int rc = rl_tok_create(k->blob, k->blob_bytes, &t, err, sizeof err);
	if (rc)
		return -ENOTSUP;
	rc = rl_cons_vocab_from_tok(t, &k->v);
	rl_tok_destroy(t);
	return rc;
}

/* The handle for (kind, text): a cached one, or a new compile in a free entry (the least
 * recently started one no sequence uses). */
static int handle_for(struct rl_rt_cons *k, int kind, const char *text, size_t len, char *err, size_t errlen)
{
	/* a handle that ran out of states is never handed out again: its later masks could miss
	 * tokens, and a fresh compile gives the next request the whole cap */
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		const struct handle *e = &k->h[i];
		if (e->c && !rl_cons_error(e->c) && e->kind == kind && e->len == len && !memcmp(e->text, text, len))
			return i;
	}
	int free_i = -1;
	for (int i = 0; i < RL_RT_CONS_HANDLES; i++) {
		const struct handle *e = &k->h[i];
		if (e->users)
			continue;
		if (!e->c || rl_cons_error(e->c)) {   /* a failed handle is of no more use */
			free_i = i;
			break;
		}
		if (free_i < 0 || e->last < k->h[free_i].last)
			free_i = i;
	}
	if (free_i < 0) {
		snprintf(err, errlen, "more than %d different constraints in use at once", RL_RT_CONS_HANDLES);
		return -EBUSY;
	}
	struct handle *e = &k->h[free_i];
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, text, len);
	copy[len] = 0;
	/* an object without additionalProperties takes no other keys (strict mode's reading) */
	const struct rl_cons_opts opts = { .flags = RL_CONS_NO_EXTRA_KEYS, .max_states = k->max_states };
	struct rl_cons *c;
	int rc = kind == RL_CONS_KIND_REGEX  ? rl_cons_compile_regex(k->v, copy, len, &opts, &c, err, errlen)
		 : kind == RL_CONS_KIND_GBNF ? rl_cons_compile_gbnf(k->v, copy, len, &opts, &c, err, errlen)
					     : rl_cons_compile_schema(k->v, copy, len, &opts, &c, err, errlen);
	if (rc) {
		free(copy);
		return rc == -E2BIG ? -EOVERFLOW : rc;   /* over the state cap: what the client is told */
	}
	rl_cons_destroy(e->c);
	free(e->text);
	*e = (struct handle){ .c = c, .kind = kind, .text = copy, .len = len };
	return free_i;
}

int rl_rt_cons_start(struct rl_rt_cons *k, uint32_t seq_id, int kind, const char *text, size_t len,
		     const uint32_t **allow, char *err, size_t errlen)
{
	if (seq_id >= k->pool_size || (kind != RL_CONS_KIND_REGEX && kind != RL_CONS_KIND_JSON_SCHEMA && kind != RL_CONS_KIND_GBNF)) {
		snprintf(err, errlen, "constraint kind %d is not one ringlm knows", kind);
		return -EINVAL;
	}
	int rc = vocab(k);
	if (rc) {
		snprintf(err, errlen, "constraints need the model's vocabulary, and this model has none");
		return rc;
	}
	rl_rt_cons_forget(k, seq_id);
	const int hi = handle_for(k, kind, text, len, err, errlen);
	if (hi < 0)
		return hi;
	struct handle *e = &k->h[hi];
	struct seq *s = &k->seq[seq_id];
	/* one buffer a pool entry, kept until destroy: a step in flight may still read the masks of
	 * a sequence cancelled meanwhile (every handle has the vocabulary's mask width) */
	if (!s->mask && !(s->mask = malloc((1 + (size_t)k->max_draft) * rl_cons_mask_words(e->c) * sizeof *s->mask)))
		return -ENOMEM;
	s->state = rl_cons_start(e->c);
	const long allowed = rl_cons_mask(e->c, s->state, s->mask);
	if (rl_cons_error(e->c)) {
		snprintf(err, errlen, "the grammar needs more than %u automaton states for its first token; simplify it "
			 "(or raise ringlmd --cons-max-states)", rl_rt_cons_max_states(k));
		return rl_cons_error(e->c) == -E2BIG ? -EOVERFLOW : -ENOMEM;
	}
	if (allowed <= 0) {            /* the compiler prunes to live states */
		snprintf(err, errlen, "the constraint allows no token of this vocabulary to start with");
		return -EINVAL;
	}
	s->h = hi;
	e->users++;
	e->last = ++k->uses;
	*allow = s->mask;
	return 0;
}

int rl_rt_cons_advance(struct rl_rt_cons *k, uint32_t seq_id, uint32_t token)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0)
		return -EINVAL;
	struct seq *s = &k->seq[seq_id];
	struct rl_cons *c = k->h[s->h].c;
	const long next = rl_cons_advance(c, s->state, token);
	if (next < 0)
		return rl_cons_error(c) ? rl_cons_error(c) : -EINVAL;
	s->state = (uint32_t)next;
	/* an accepting state with no way on allows the end-of-generation ids alone: the next
	 * step samples one and the request ends */
	rl_cons_mask(c, s->state, s->mask);
	/* a mask computed while the grammar met its cap may lack tokens the grammar allows, or
	 * allow none: the request cannot go on under it */
	return rl_cons_error(c);
}

int rl_rt_cons_error(const struct rl_rt_cons *k, uint32_t seq_id)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0)
		return 0;
	return rl_cons_error(k->h[k->seq[seq_id].h].c);
}

uint32_t rl_rt_cons_max_states(const struct rl_rt_cons *k)
{
	return k->max_states ? k->max_states : 100000;
}

uint32_t rl_rt_cons_drafts(struct rl_rt_cons *k, uint32_t seq_id, uint32_t *draft, uint32_t n, uint32_t cap)
{
	if (seq_id >= k->pool_size || k->seq[seq_id].h < 0)
		return n;
	struct seq *s = &k->seq[seq_id];
	struct rl_cons *c = k->h[s->h].c;
	if (rl_cons_error(c))
		return 0;              /* the sequence ends at its next token (rl_rt_cons_advance) */
	const size_t words = rl_cons_mask_words(c);
	if (cap > k->max_draft)
		cap = k->max_draft;
	uint32_t st = s->state, kept = 0;
	/* the drafts as far as the constraint allows them (a mask after each) */
	for (; kept < n && kept < cap; kept++) {
		const long next = rl_cons_advance(c, st, draft[kept]);
		if (next < 0 || rl_cons_vocab_is_eog(k->v, draft[kept]))
			break;                 /* an end is sampled, never drafted */
		st = (uint32_t)next;
		rl_cons_mask(c, st, s->mask + (kept + 1) * words);
	}
	/* then the bytes the constraint forces, cut into the vocabulary's longest tokens: drafts
	 * the model verifies like any. The cut that reaches the end of the forced bytes is left
	 * out where tokens go on past it (" named" + " " where the model writes " named" + " Lily"):
	 * the choice after the forced bytes is the model's. */
	char forced[64];
	while (kept < cap) {
		const size_t nb = rl_cons_forced(c, st, forced, sizeof forced);
		uint32_t len = 0;
		int longer = 0;
		const long id = nb ? rl_cons_vocab_longest(k->v, forced, nb, &len, &longer) : -1;
		if (id < 0 || (len == nb && longer))
			break;
		const long next = rl_cons_advance(c, st, (uint32_t)id);
		if (next < 0)
			break;
		draft[kept] = (uint32_t)id;
		st = (uint32_t)next;
		rl_cons_mask(c, st, s->mask + ++kept * words);
	}
	/* a grammar that met its cap while its drafts were walked may have left a draft's mask
	 * short, or empty (a step with an empty row fails whole): no drafts, the row of the
	 * sequence's own mask, which came before, alone */
	return rl_cons_error(c) ? 0 : kept;
}

void rl_rt_cons_forget(struct rl_rt_cons *k, uint32_t seq_id)
{
	if (!k || seq_id >= k->pool_size || k->seq[seq_id].h < 0)
		return;
	struct seq *s = &k->seq[seq_id];
	k->h[s->h].users--;
	s->h = -1;                             /* its mask buffer stays (see rl_rt_cons_start) */
}
