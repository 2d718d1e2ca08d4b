/* cons_internal.h — what the constrain/ files share and nothing outside uses: the regex tree
 * and the DFA the regex compiler hands on, the rule sets that grammars and recursive schemas
 * become, and the grammar matcher the mask code drives. */
#ifndef RL_CONS_INTERNAL_H
#define RL_CONS_INTERNAL_H
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* A byte-level DFA: state 0 is dead (every byte leads back to it), every other state can
 * still reach an accepting one. Bytes fall into ncls classes that no transition tells apart,
 * so the table is n x ncls instead of n x 256. */
struct rl_cons_dfa {
	uint32_t n, start, ncls;
	uint8_t  cls[256];
	uint32_t *next;                /* [n * ncls] */
	uint8_t  *accept;              /* [n] */
	uint8_t  *cont;                /* [n] some byte leads to a live state */
};

/* Room for need elements in array p of capacity cap (a variable or field of any unsigned
 * type), doubling from min: 0, or -ENOMEM with p and cap as they were. The one way the
 * compilers grow an array. */
static inline void *rl_grow_to(void *p, size_t elem, size_t need, size_t *cap, size_t min)
{
	if (need <= *cap && p)
		return p;
	size_t nc = *cap ? *cap : min ? min : 1;
	while (nc < need)
		nc *= 2;
	void *q = realloc(p, nc * elem);
	if (q)
		*cap = nc;
	return q;
}
#define RL_GROW(p, cap, need, min) __extension__ ({                                    \
		size_t c_ = (cap);                                                      \
		void *q_ = rl_grow_to((p), sizeof *(p), (need), &c_, (min));            \
		if (q_) {                                                               \
			(p) = q_;                                                       \
			(cap) = c_;                                                     \
		}                                                                       \
		q_ ? 0 : -ENOMEM; })

/* The compilers' one hash table: ids (dense uint32s the caller numbers) in open addressing,
 * stored + 1 (0: empty), hashed and compared by the caller; at half load it doubles, rehashing
 * ids [first, n) by the caller's hash of an id. Lookup:
 *   for (i = rl_idtab_at(t, h); t->slot[i]; i = rl_idtab_next(t, i))
 *           if (the key is id t->slot[i] - 1) return it;
 *   ...then rl_idtab_put(t, i, new id, ...) at the empty slot the walk stopped on. */
struct rl_idtab { uint32_t *slot, cap; };
static inline uint64_t rl_hash_mix(uint64_t h) { h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; return h; }
/* a set of ids (FNV-1a, then mixed) */
static inline uint64_t rl_hash_ids(const uint32_t *s, uint32_t k)
{
	uint64_t h = 1469598103934665603ull ^ k;
	for (uint32_t i = 0; i < k; i++)
		h = (h ^ s[i]) * 1099511628211ull;
	return rl_hash_mix(h);
}
typedef uint64_t rl_idtab_hash_fn(const void *ctx, uint32_t id);
static inline int rl_idtab_init(struct rl_idtab *t, uint32_t cap)   /* cap: a power of two */
{
	t->cap = cap;
	t->slot = calloc(cap, sizeof *t->slot);
	return t->slot ? 0 : -ENOMEM;
}
static inline uint32_t rl_idtab_at(const struct rl_idtab *t, uint64_t h) { return (uint32_t)h & (t->cap - 1); }
static inline uint32_t rl_idtab_next(const struct rl_idtab *t, uint32_t i) { return (i + 1) & (t->cap - 1); }
static inline int rl_idtab_put(struct rl_idtab *t, uint32_t i, uint32_t id, uint32_t first, uint32_t n,
			       rl_idtab_hash_fn *hash, const void *ctx)
{
	t->slot[i] = id + 1;
	if ((uint64_t)n * 2 <= t->cap)
		return 0;
	struct rl_idtab u;
	if (rl_idtab_init(&u, t->cap * 2))
		return -ENOMEM;
	for (uint32_t q = first; q < n; q++) {
		uint32_t j = rl_idtab_at(&u, hash(ctx, q));
		while (u.slot[j])
			j = rl_idtab_next(&u, j);
		u.slot[j] = q + 1;
	}
	free(t->slot);
	*t = u;
	return 0;
}

/* parse flags */
#define RL_RE_INTERNAL 1u              /* the schema compiler's own syntax: (?J:...) matches its
					* body as the inside of a JSON string (quotes, backslashes and
					* control characters escaped), so a 'pattern' can sit there */
#define RL_RE_RULES    2u              /* (?&NAME): the whole of rule NAME of a rule set, in place */
#define RL_GRAM_KEEP   4u              /* rl_cons_gram_build: every rule stays a rule, none inlined:
					* a rule set too large for one DFA as a grammar over small
					* terminal DFAs */
/* rl_cons_schema_rules' flags beside rl_cons_opts.flags: every plain '$ref' a rule of its own
 * (each target written once, however often it is named) */
#define RL_SCHEMA_SPLIT 0x100u
/* ... and a first try's bound on its expression (SPLIT_TEXT in cons_schema.c), past which the
 * try is -E2BIG at once */
#define RL_SCHEMA_SMALL 0x200u

/* The parsed expression */
enum { N_EMPTY, N_CLASS, N_CAT, N_ALT, N_REP, N_REF };
struct rl_re_range { uint32_t lo, hi; };
struct rl_re_node {
	int kind;
	int json;                      /* N_CLASS inside (?J:...): JSON-escape what must be */
	int min, max;                  /* N_REP; max -1: unbounded. N_REF: min is the rule's index */
	struct rl_re_range *r;         /* N_CLASS: sorted, merged code-point ranges */
	size_t nr;
	struct rl_re_node **kid;       /* N_CAT, N_ALT, N_REP (one) */
	size_t nkid;
};
/* re parsed into *out; with RL_RE_RULES, (?&NAME) names one of names[nnames]. 0, -EINVAL,
 * -ENOMEM. */
int  rl_cons_regex_tree(const char *re, size_t len, unsigned pflags, const char *const *names, size_t nnames,
			struct rl_re_node **out, char *err, size_t errlen);
void rl_cons_tree_free(struct rl_re_node *x);
/* The DFA of a tree without N_REF. 0, -E2BIG, -ENOENT (it matches no string), -ENOMEM; err says. */
int  rl_cons_tree_dfa(const struct rl_re_node *x, uint32_t max_states, struct rl_cons_dfa *out, char *err,
		      size_t errlen);

/* rl_cons_regex_tree then rl_cons_tree_dfa ("matches no string" is -EINVAL here) */
int  rl_cons_regex_dfa(const char *re, size_t len, unsigned pflags, uint32_t max_states,
		       struct rl_cons_dfa *out, char *err, size_t errlen);
void rl_cons_dfa_free(struct rl_cons_dfa *d);

/* A handle over vocabulary v that takes d over (d is zeroed; freed on failure). */
struct rl_cons_vocab;
struct rl_cons;
struct rl_cons_opts;
int  rl_cons_from_dfa(const struct rl_cons_vocab *v, struct rl_cons_dfa *d, const struct rl_cons_opts *opts,
		      struct rl_cons **out);

/* A rule set: rule 0 is where matching starts; each body is an expression in the regex
 * syntax with RL_RE_RULES (and RL_RE_INTERNAL where the schema compiler wrote it). GBNF
 * (cons_gbnf.c) and recursive JSON Schemas (cons_schema.c) become one. */
struct rl_cons_rules {
	size_t n, cap;
	char **name, **body;
	size_t *len;
};
int  rl_cons_rules_add(struct rl_cons_rules *r, const char *name, const char *body, size_t len);
void rl_cons_rules_free(struct rl_cons_rules *r);
int  rl_cons_gbnf_rules(const char *text, size_t len, struct rl_cons_rules *out, char *err, size_t errlen);
/* The schema as a rule set: one rule when it has no recursion (its regular expression). */
int  rl_cons_schema_rules(const char *schema, size_t len, unsigned flags, struct rl_cons_rules *out, char *err,
			  size_t errlen);

/* A handle over a rule set: a grammar, or a DFA when no recursion is left (cons_mask.c) */
struct rl_cons_vocab;
struct rl_cons;
struct rl_cons_opts;
int  rl_cons_compile_rules(const struct rl_cons_vocab *v, const struct rl_cons_rules *r, unsigned pflags,
			   const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen);

/* The grammar matcher (cons_gram.c): rules whose recursion no DFA holds, as a pushdown
 * automaton over terminal DFAs, determinised lazily. Its states (configurations: the set of
 * stacks a prefix can leave) are numbered as they are met, so the handle's table d grows:
 * d->next holds RL_GRAM_UNKNOWN where a transition was not computed yet. */
struct rl_cons_gram;
#define RL_GRAM_UNKNOWN UINT32_MAX
/* Rules into a grammar (*g) or, when no recursion is left once the rules that do not recurse
 * are inlined, one DFA (*d, *g NULL). 0, -EINVAL (err names the rule), -E2BIG, -ENOMEM. */
int  rl_cons_gram_build(const struct rl_cons_rules *r, unsigned pflags, uint32_t max_states, struct rl_cons_gram **g,
			struct rl_cons_dfa *d, char *err, size_t errlen);
void rl_cons_gram_free(struct rl_cons_gram *g);
/* The table's first states (dead 0, the start) into d */
int  rl_cons_gram_init(struct rl_cons_gram *g, struct rl_cons_dfa *d);
/* The state after byte of state s, computed, stored in d (which may grow: re-read
 * d->next) and returned; RL_CONS_DEAD when over the state cap or out of memory (sticky:
 * rl_cons_gram_error says). */
uint32_t rl_cons_gram_fill(struct rl_cons_gram *g, struct rl_cons_dfa *d, uint32_t s, uint8_t byte);
int  rl_cons_gram_error(const struct rl_cons_gram *g);
/* the fewest bytes from state s to a whole match (UINT32_MAX for the dead state) */
uint32_t rl_cons_gram_dist(const struct rl_cons_gram *g, uint32_t s);

static inline uint32_t rl_cons_dfa_step(const struct rl_cons_dfa *d, uint32_t s, uint8_t b)
{
	return d->next[(size_t)s * d->ncls + d->cls[b]];
}
#endif
