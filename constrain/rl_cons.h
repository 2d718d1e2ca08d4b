/* rl_cons.h — structured output's engine core: a constraint (a regular expression, a JSON
 * Schema, a GBNF grammar) becomes a byte-level automaton once; per decoding step, the
 * allowed-token mask of a state comes from walking a trie of the vocabulary's token bytes
 * against it. Without recursion the automaton is a DFA; a grammar or schema whose recursion
 * no DFA holds becomes a pushdown matcher over terminal DFAs (cons_gram.c) whose states
 * (configurations of its stacks) are numbered as they are met, behind the same uint32 state.
 *
 * Pieces, each swappable behind this interface:
 *   rl_cons_vocab  each token id's bytes (from tokenizer/), in a byte trie laid out in preorder;
 *                  built once per vocabulary, shared by every constraint on it.
 *   rl_cons        a compiled constraint over one vocabulary: the DFA (dead state pruned, so a
 *                  state either can still reach an accepting state or is RL_CONS_DEAD) and a
 *                  bounded LRU cache of per-state masks (JSON automata revisit states).
 *   state          a request's position: a uint32 state, the caller keeps it per row. A
 *                  grammar's state numbers grow as outputs reach new configurations (up to
 *                  max_states; past it the handle fails its advances with -E2BIG).
 * Matching is anchored at both ends: the whole output must match. End-of-generation tokens
 * (EOS and the vocabulary's other EOG ids) are allowed exactly in accepting states; other
 * control, unknown and unused tokens never are.
 *
 * Library code: 0/count or -errno, a one-line reason in err for what a client wrote; never
 * exits. Not thread-safe per rl_cons (the mask cache): one thread computes a handle's masks,
 * as the runtime thread would; separate handles are independent. */
#ifndef RL_CONS_H
#define RL_CONS_H
#include <stddef.h>
#include <stdint.h>

struct rl_tok;
struct rl_cons_vocab;
struct rl_cons;

#define RL_CONS_DEAD 0u                /* the state no continuation leaves */

/* The vocabulary from a tokenizer: byte-level BPE tokens as their bytes, SentencePiece pieces
 * with U+2581 as a space and <0xNN> byte pieces as that byte. 0, -ENOMEM. */
int  rl_cons_vocab_from_tok(const struct rl_tok *t, struct rl_cons_vocab **out);
/* The same from explicit byte strings (tests, other tokenizers): tok[i]/len[i] for i < n;
 * special[i] != 0 marks a token never allowed (NULL: none); eog[] the end-of-generation ids. */
int  rl_cons_vocab_create(uint32_t n, const char *const *tok, const uint32_t *len, const uint8_t *special,
			  const uint32_t *eog, size_t n_eog, struct rl_cons_vocab **out);
void rl_cons_vocab_destroy(struct rl_cons_vocab *v);
uint32_t rl_cons_vocab_size(const struct rl_cons_vocab *v);
/* Bytes of token id as the mask sees them (NULL when it never is allowed as text). */
const char *rl_cons_vocab_bytes(const struct rl_cons_vocab *v, uint32_t id, uint32_t *len);
/* 1 when id is one of the end-of-generation ids */
int  rl_cons_vocab_is_eog(const struct rl_cons_vocab *v, uint32_t id);
/* The longest token whose bytes begin bytes[0..n) (a trie descent): its id and, in *len, its
 * length; -1 when no token's bytes do. *longer: 1 when some tokens begin with all n bytes
 * and go on. */
long rl_cons_vocab_longest(const struct rl_cons_vocab *v, const void *bytes, size_t n, uint32_t *len, int *longer);

/* Compile options (flags) */
#define RL_CONS_NO_EXTRA_KEYS 1u       /* JSON Schema: an object schema without
					* additionalProperties gets no keys beyond its properties
					* (as XGrammar's strict mode); without it such a schema is refused */
struct rl_cons_opts {
	unsigned flags;
	uint32_t max_states;               /* DFA state cap; 0: 100000 */
	size_t   cache_bytes;              /* bytes of cached masks (words x 4 each); 0: 64 MiB */
};

/* Compiles an anchored regular expression (a UTF-8 string; Python re syntax subset, see
 * cons_regex.c) over vocabulary v (kept by reference: it must outlive the handle).
 * 0, -EINVAL (with the reason naming what is wrong), -E2BIG (more states than the cap),
 * -ENOMEM. opts may be NULL. */
int  rl_cons_compile_regex(const struct rl_cons_vocab *v, const char *re, size_t len,
			   const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen);
/* Compiles a JSON Schema (JSON text) into the same automaton: compact JSON (no whitespace),
 * properties in the schema's order. Every keyword it does not enforce is refused by name.
 * $ref to a $defs entry may recurse (a tree whose children are trees): the schema then
 * becomes a grammar. */
int  rl_cons_compile_schema(const struct rl_cons_vocab *v, const char *schema, size_t len,
			    const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen);
/* The regular expression a JSON Schema compiles to (what rl_cons_compile_schema runs through
 * the regex compiler), malloc'd into *out; 0 or -EINVAL/-ENOMEM as above; -EINVAL for a
 * recursive schema, which no regular expression holds. */
int  rl_cons_schema_to_regex(const char *schema, size_t len, unsigned flags, char **out, char *err,
			     size_t errlen);
/* Compiles a grammar in llama.cpp's GBNF (see cons_gbnf.c for what it takes and refuses):
 * matching starts at rule 'root'. */
int  rl_cons_compile_gbnf(const struct rl_cons_vocab *v, const char *text, size_t len,
			  const struct rl_cons_opts *opts, struct rl_cons **out, char *err, size_t errlen);
void rl_cons_destroy(struct rl_cons *c);
/* 1 when the handle is a grammar's pushdown matcher (0: one DFA) */
int  rl_cons_is_grammar(const struct rl_cons *c);
/* a grammar's sticky failure (-E2BIG: more states than max_states; -ENOMEM), 0 none */
int  rl_cons_error(const struct rl_cons *c);

uint32_t rl_cons_start(const struct rl_cons *c);
/* states so far (a grammar's grow as they are met) */
uint32_t rl_cons_n_states(const struct rl_cons *c);
/* 1 when the output so far is a whole match (EOS allowed) */
int  rl_cons_accepting(const struct rl_cons *c, uint32_t state);
/* 1 when some non-empty byte continuation stays matchable */
int  rl_cons_can_continue(const struct rl_cons *c, uint32_t state);
/* The state after n bytes (RL_CONS_DEAD when they leave the language). Not const: a
 * grammar computes and keeps transitions it has not met (as do the masks). */
uint32_t rl_cons_feed(struct rl_cons *c, uint32_t state, const void *bytes, size_t n);
/* The state after token id: >= 0 the new state (an EOG id in an accepting state leaves it as
 * is: the request ends there), -EINVAL when the mask would not allow the token, a grammar's
 * rl_cons_error when it failed. */
long rl_cons_advance(struct rl_cons *c, uint32_t state, uint32_t id);
/* The bytes every continuation from state starts with (the constraint forces them), up to
 * cap, into out: none from an accepting state, and none past a point with two ways on; none
 * for a grammar. */
size_t rl_cons_forced(struct rl_cons *c, uint32_t state, char *out, size_t cap);
/* Words of a mask: (vocab size + 31) / 32 */
size_t rl_cons_mask_words(const struct rl_cons *c);
/* The allowed tokens of state into mask (bit i of word i/32 = token i; every word written).
 * Returns how many tokens are allowed (0 for RL_CONS_DEAD). Cached per state. */
long rl_cons_mask(struct rl_cons *c, uint32_t state, uint32_t *mask);
/* The same without the cache (the trie walk every time): the benchmark's cold path. */
long rl_cons_mask_nocache(struct rl_cons *c, uint32_t state, uint32_t *mask);
/* The fewest bytes from state to a whole match (UINT32_MAX for the dead state, or without
 * memory). Walks that must end soon head for the end by it (tests, the benchmark). */
uint32_t rl_cons_dist(struct rl_cons *c, uint32_t state);
/* Computes into the cache the masks of the states nearest the start, breadth first over
 * tokens (the states a token from a state cached ends in), until the cache is full or
 * budget_ns of the calling thread's CPU time is spent: what a compile can do ahead for the
 * first visits. A DFA's alone (a grammar's states are numbered as outputs meet them).
 * Returns the states computed. */
uint32_t rl_cons_prewarm(struct rl_cons *c, uint64_t budget_ns);
/* cache counters since compile */
void rl_cons_cache_stats(const struct rl_cons *c, uint64_t *hits, uint64_t *misses, size_t *bytes);
/* masks made from the plain tokens' bitmask and the other tokens' walk (cons_mask.c's
 * shortcut for states that every plain character leads back to) */
uint64_t rl_cons_plain_masks(const struct rl_cons *c);

#endif
