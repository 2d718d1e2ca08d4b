/* rl_chat.c — chat template families (see rl_chat.h). The formats follow the families'
 * published templates:
 *   Llama 3:  <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *             ... then <|start_header_id|>assistant<|end_header_id|>\n\n
 *   ChatML:   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... then <|im_start|>assistant\n
 *             (a template that writes a default system turn, as Qwen2's and SmolLM2's do,
 *             has it taken out at load: rl_chat_default_system)
 *   Mistral:  <s>[INST] USER [/INST] ASSISTANT</s>[INST] USER [/INST]; a system message is
 *             put before the first user message, as Mistral's v1 template does.
 *   Phi-3:    <|ROLE|>\nCONTENT<|end|>\n ... then <|assistant|>\n
 *   Gemma:    <bos><start_of_turn>user\nCONTENT<end_of_turn>\n<start_of_turn>model\n... then
 *             <start_of_turn>model\n; a system message opens the first user turn, followed by
 *             a blank line, and the roles alternate, as Gemma 3's template has them. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "tokenizer/rl_chat.h"

enum rl_chat_family rl_chat_detect(const char *t)
{
	if (!t)
		return RL_CHAT_NONE;
	if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>"))
		return RL_CHAT_LLAMA3;
	if (strstr(t, "<|im_start|>") && strstr(t, "<|im_end|>"))
		return RL_CHAT_CHATML;
	if (strstr(t, "[INST]") && strstr(t, "[/INST]"))
		return RL_CHAT_MISTRAL;
	if (strstr(t, "<|user|>") && strstr(t, "<|assistant|>") && strstr(t, "<|end|>"))
		return RL_CHAT_PHI3;
	if (strstr(t, "<start_of_turn>") && strstr(t, "<end_of_turn>"))
		return RL_CHAT_GEMMA;
	return RL_CHAT_NONE;
}

static const char *const names[] = { "", "llama3", "chatml", "mistral", "phi3", "gemma" };

const char *rl_chat_name(enum rl_chat_family f)
{
	return f >= RL_CHAT_NONE && f <= RL_CHAT_LAST ? names[f] : "";
}

enum rl_chat_family rl_chat_from_name(const char *s)
{
	for (int f = RL_CHAT_LLAMA3; f <= RL_CHAT_LAST; f++)
		if (s && !strcmp(s, names[f]))
			return (enum rl_chat_family)f;
	return RL_CHAT_NONE;
}

const char *rl_chat_end(enum rl_chat_family f)
{
	return f == RL_CHAT_LLAMA3 ? "<|eot_id|>" : f == RL_CHAT_CHATML ? "<|im_end|>" : f == RL_CHAT_MISTRAL ? "</s>"
	       : f == RL_CHAT_PHI3 ? "<|end|>" : f == RL_CHAT_GEMMA ? "<end_of_turn>" : "";
}

const char *rl_chat_template_text(enum rl_chat_family f)
{
	switch (f) {
	case RL_CHAT_LLAMA3:
		return "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
		       "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
		       "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}";
	case RL_CHAT_CHATML:
		return "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + "
		       "'<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}";
	case RL_CHAT_MISTRAL:
		return "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{- '[INST] ' + "
		       "message['content'] + ' [/INST]' }}{%- else %}{{- ' ' + message['content'] + eos_token }}{%- endif %}{%- endfor %}";
	case RL_CHAT_PHI3:
		return "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
		       "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
		       "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
		       "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
	case RL_CHAT_GEMMA:
		return "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + "
		       "'\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = \"\" -%}{%- set "
		       "loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- if (message['role'] == "
		       "'assistant') -%}{%- set role = \"model\" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
		       "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}{{ message['content'] | "
		       "trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}"
		       "{%- endif -%}";
	default:
		return "";
	}
}

struct buf { char *p; size_t cap, n; };

__attribute__((format(printf, 2, 3)))
static void put(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(b->n < b->cap ? b->p + b->n : NULL, b->n < b->cap ? b->cap - b->n : 0, fmt, ap);
	va_end(ap);
	if (k > 0)
		b->n += (size_t)k;
}

/* system, user, assistant; and Llama 3's ipython (a tool's result, as Llama 3.1's template
 * writes it) */
static int known_role(enum rl_chat_family f, const char *r)
{
	return r && (!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") ||
		     (f == RL_CHAT_LLAMA3 && !strcmp(r, "ipython")));
}

size_t rl_chat_default_system(const char *t, char *out, size_t cap)
{
	static const char *const opens[] = { "<|im_start|>system\n", "<|im_start|>system\\n" };
	if (cap)
		out[0] = 0;
	for (size_t k = 0; t && k < 2; k++) {
		const char *s = strstr(t, opens[k]), *e = s ? strstr(s, "<|im_end|>") : NULL;
		if (!e)
			continue;
		s += strlen(opens[k]);
		/* a literal only: a quote, an expression or a concatenation is the conversation's own */
		if (e == s || memchr(s, '\'', (size_t)(e - s)) || memchr(s, '"', (size_t)(e - s)) ||
		    memchr(s, '{', (size_t)(e - s)) || memchr(s, '+', (size_t)(e - s)))
			continue;
		size_t n = 0;
		for (; s < e; s++) {
			char c = *s;
			if (c == '\\' && s + 1 < e && s[1] == 'n') {
				c = '\n';
				s++;
			}
			if (n + 1 < cap)
				out[n] = c;
			n++;
		}
		if (cap)
			out[n < cap ? n : cap - 1] = 0;
		return n < cap ? n : cap - 1;
	}
	return 0;
}

long rl_chat_format(enum rl_chat_family f, const char *dflt_system, const struct rl_chat_msg *m, size_t n,
		    char *out, size_t cap)
{
	struct buf b = { out, cap, 0 };
	if (cap)
		out[0] = 0;
	for (size_t i = 0; i < n; i++)
		if (!known_role(f, m[i].role) || !m[i].content)
			return -EINVAL;
	switch (f) {
	case RL_CHAT_LLAMA3:
		put(&b, "<|begin_of_text|>");
		for (size_t i = 0; i < n; i++)
			put(&b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", m[i].role, m[i].content);
		put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		break;
	case RL_CHAT_CHATML:
		if ((!n || strcmp(m[0].role, "system")) && dflt_system && *dflt_system)
			put(&b, "<|im_start|>system\n%s<|im_end|>\n", dflt_system);
		for (size_t i = 0; i < n; i++)
			put(&b, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
		put(&b, "<|im_start|>assistant\n");
		break;
	case RL_CHAT_MISTRAL: {
		size_t i = 0;
		const char *sys = NULL;
		if (n && !strcmp(m[0].role, "system"))
			sys = m[i++].content;
		put(&b, "<s>");
		for (int want_user = 1; i < n; i++, want_user = !want_user) {
			if (strcmp(m[i].role, want_user ? "user" : "assistant"))
				return -EINVAL;
			if (want_user) {
				if (sys) {
					put(&b, "[INST] %s\n\n%s [/INST]", sys, m[i].content);
					sys = NULL;
				} else {
					put(&b, "[INST] %s [/INST]", m[i].content);
				}
			} else {
				put(&b, " %s</s>", m[i].content);
			}
		}
		if (n && !strcmp(m[n - 1].role, "assistant"))
			return -EINVAL;    /* the assistant's turn must be the one to generate */
		break;
	}
	case RL_CHAT_PHI3:
		for (size_t i = 0; i < n; i++)
			put(&b, "<|%s|>\n%s<|end|>\n", m[i].role, m[i].content);
		put(&b, "<|assistant|>\n");
		break;
	case RL_CHAT_GEMMA: {
		size_t i = 0;
		const char *sys = NULL;
		if (n && !strcmp(m[0].role, "system"))
			sys = m[i++].content;
		put(&b, "<bos>");
		for (int want_user = 1; i < n; i++, want_user = !want_user) {
			if (strcmp(m[i].role, want_user ? "user" : "assistant"))
				return -EINVAL;
			put(&b, "<start_of_turn>%s\n%s%s%s<end_of_turn>\n", want_user ? "user" : "model", sys ? sys : "",
			    sys ? "\n\n" : "", m[i].content);
			sys = NULL;
		}
		if (n && !strcmp(m[n - 1].role, "assistant"))
			return -EINVAL;    /* the model's turn must be the one to generate */
		put(&b, "<start_of_turn>model\n");
		break;
	}
	default:
		return -EINVAL;
	}
	if (cap && b.n >= cap)
		out[cap - 1] = 0;
	return (long)b.n;
}

/* A Jinja string literal of s (the lexer unescapes \\, \", \n, \r, \t and \uXXXX). */
static void put_literal(struct buf *b, const char *s)
{
	put(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\\' || c == '"')
			put(b, "\\%c", c);
		else if (c == '\n')
			put(b, "\\n");
		else if (c == '\r')
			put(b, "\\r");
		else if (c == '\t')
			put(b, "\\t");
		else if (c < 0x20)
			put(b, "\\u%04x", c);
		else
			put(b, "%c", c);
	}
	put(b, "\"");
}

/* rl_chat_format's rules as Jinja, one family at a time; single lines of tags only, so
 * transformers' trim_blocks / lstrip_blocks change nothing. */
#define J_ROLES(extra) "{%- for message in messages -%}{%- if message['role'] not in ['system', 'user', 'assistant'" \
	extra "] or message['content'] is not string -%}{{ raise_exception('ringlm formats roles system, user, " \
	"assistant with text content') }}{%- endif -%}{%- endfor -%}"
#define J_SPLIT_SYSTEM "{%- if messages and messages[0]['role'] == 'system' -%}{%- set sys = messages[0]['content'] -%}" \
	"{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set sys = none -%}{%- set loop_messages = messages -%}{%- endif -%}"
#define J_ALTERNATE "{%- if message['role'] != ['user', 'assistant'][loop.index0 % 2] -%}{{ raise_exception(" \
	"'after an optional system message, roles must alternate user/assistant') }}{%- endif -%}"
#define J_LAST_USER "{%- if loop_messages and loop_messages[-1]['role'] == 'assistant' -%}{{ raise_exception(" \
	"'the last message must be the user\\'s: the assistant\\'s turn is the one to generate') }}{%- endif -%}"

long rl_chat_jinja(enum rl_chat_family f, const char *dflt_system, char *out, size_t cap)
{
	struct buf b = { out, cap, 0 };
	if (cap)
		out[0] = 0;
	switch (f) {
	case RL_CHAT_LLAMA3:
		put(&b, "%s", J_ROLES(", 'ipython'")
		    "{{- '<|begin_of_text|>' -}}{%- for message in messages -%}{{ '<|start_header_id|>' + message['role'] + "
		    "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{%- endfor -%}{%- if add_generation_prompt -%}"
		    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}");
		break;
	case RL_CHAT_CHATML:
		put(&b, "%s", J_ROLES(""));
		if (dflt_system && *dflt_system) {
			put(&b, "{%%- if not messages or messages[0]['role'] != 'system' -%%}{{ '<|im_start|>system\\n' + ");
			put_literal(&b, dflt_system);
			put(&b, " + '<|im_end|>\\n' }}{%%- endif -%%}");
		}
		put(&b, "%s", "{%- for message in messages -%}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
		    "'<|im_end|>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}");
		break;
	case RL_CHAT_MISTRAL:
		put(&b, "%s", J_ROLES("") J_SPLIT_SYSTEM "{{- '<s>' -}}{%- for message in loop_messages -%}" J_ALTERNATE
		    "{%- if message['role'] == 'user' -%}{%- if loop.first and sys is not none -%}{{ '[INST] ' + sys + '\\n\\n' + "
		    "message['content'] + ' [/INST]' }}{%- else -%}{{ '[INST] ' + message['content'] + ' [/INST]' }}{%- endif -%}"
		    "{%- else -%}{{ ' ' + message['content'] + '</s>' }}{%- endif -%}{%- endfor -%}" J_LAST_USER);
		break;
	case RL_CHAT_PHI3:
		put(&b, "%s", J_ROLES("") "{%- for message in messages -%}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
		    "'<|end|>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}");
		break;
	case RL_CHAT_GEMMA:
		put(&b, "%s", J_ROLES("") J_SPLIT_SYSTEM "{{- '<bos>' -}}{%- for message in loop_messages -%}" J_ALTERNATE
		    "{{ '<start_of_turn>' + ('user' if message['role'] == 'user' else 'model') + '\\n' + (sys + '\\n\\n' if "
		    "loop.first and sys is not none else '') + message['content'] + '<end_of_turn>\\n' }}{%- endfor -%}" J_LAST_USER
		    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}");
		break;
	default:
		return -EINVAL;
	}
	if (cap && b.n >= cap)
		out[cap - 1] = 0;
	return (long)b.n;
}
