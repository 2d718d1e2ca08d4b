/* rl_json.h — a small strict JSON (RFC 8259) parser for safetensors headers and Hugging Face
 * config.json: a tree of values, depth- and size-limited because the input is untrusted. */
#ifndef RL_JSON_H
#define RL_JSON_H
#include <stddef.h>

enum rl_json_type { RL_JSON_NULL, RL_JSON_BOOL, RL_JSON_NUM, RL_JSON_STR, RL_JSON_ARR, RL_JSON_OBJ };

struct rl_json {
	enum rl_json_type type;
	double num;                    /* NUM; BOOL as 0/1 */
	char *str;                     /* STR: decoded, NUL-terminated (may contain NULs: slen) */
	size_t slen;
	size_t n;                      /* ARR/OBJ: element count */
	struct rl_json *v;             /* ARR/OBJ elements */
	char **k;                      /* OBJ keys */
};

/* Parses exactly len bytes (one value, surrounding whitespace allowed). NULL on error with a
 * reason and byte offset in err. */
struct rl_json *rl_json_parse(const char *s, size_t len, char *err, size_t errlen);
void rl_json_free(struct rl_json *j);
/* Member of an object by key (first match), or NULL. */
const struct rl_json *rl_json_get(const struct rl_json *obj, const char *key);
#endif
