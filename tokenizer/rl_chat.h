/* rl_chat.h — chat templates: which family a model's tokenizer.chat_template (a Jinja text in
 * the GGUF or tokenizer_config.json) belongs to, and formatting a conversation the way that
 * family's template does. ringlm does not run Jinja: it recognises the families users bring
 * (Llama 3, ChatML as Qwen2 and Qwen3 use it, Mistral's [INST], Phi-3's, Gemma's) by their marker tokens and formats those
 * itself; any other template is "unknown" and the HTTP front answers /v1/chat/completions with
 * a 400 that points at /v1/completions. The model loader detects, the runtime publishes the
 * family name in its info segment, the HTTP front formats. */
#ifndef RL_CHAT_H
#define RL_CHAT_H
#include <stddef.h>

enum rl_chat_family { RL_CHAT_NONE = 0, RL_CHAT_LLAMA3, RL_CHAT_CHATML, RL_CHAT_MISTRAL, RL_CHAT_PHI3, RL_CHAT_GEMMA };
#define RL_CHAT_LAST RL_CHAT_GEMMA

/* The family of a template text (NULL or unrecognised: RL_CHAT_NONE). */
enum rl_chat_family rl_chat_detect(const char *tmpl);
/* "llama3", "chatml", "mistral", "phi3", "gemma", or "" for RL_CHAT_NONE. */
const char *rl_chat_name(enum rl_chat_family f);
/* The family of a name rl_chat_name gave; RL_CHAT_NONE otherwise. */
enum rl_chat_family rl_chat_from_name(const char *name);

struct rl_chat_msg {
	const char *role;              /* "system", "user", "assistant" (and Llama 3's "ipython") */
	const char *content;
};

/* The system turn a ChatML template writes when the conversation has none (Qwen2's "You are a
 * helpful assistant.", SmolLM2's own): the literal text between "<|im_start|>system\n" and
 * "<|im_end|>" where the template spells it out. Writes it NUL-terminated into out (cut to
 * cap) and returns its length; 0 (out "") when the template has none. */
size_t rl_chat_default_system(const char *tmpl, char *out, size_t cap);

/* Formats n messages as family f's template does, with the assistant's turn opened at the end
 * (add_generation_prompt); dflt_system (rl_chat_default_system's, or NULL) opens a ChatML
 * conversation that has no system message. The text begins with the family's BOS text where its template writes
 * one (Llama 3's <|begin_of_text|>, Mistral's <s>, Gemma's <bos>), so tokenize it without adding BOS and with
 * control tokens parsed. Writes at most cap bytes (NUL included) and returns the length
 * needed (excluding the NUL); -EINVAL for an unknown family or role, or a Mistral or Gemma
 * conversation whose roles do not alternate user/assistant. */
long rl_chat_format(enum rl_chat_family f, const char *dflt_system, const struct rl_chat_msg *m, size_t n,
		    char *out, size_t cap);
/* A Jinja template of family f (the shape of the family's published one) for the GGUF writer
 * to store as tokenizer.chat_template, so test models carry a family; "" for none. */
const char *rl_chat_template_text(enum rl_chat_family f);
/* A Jinja chat template (Hugging Face's tokenizer_config.json chat_template) that renders a
 * conversation exactly as rl_chat_format formats it for family f with dflt_system (NULL or
 * "": none), the assistant's turn opened under add_generation_prompt, and raise_exception
 * where rl_chat_format refuses (an unknown role, Mistral or Gemma roles out of turn): for
 * export-hf, so a frontend that renders templates (transformers' apply_chat_template) prefills
 * what ringlm prefills. Writes at most cap bytes (NUL included), returns the length needed;
 * -EINVAL for RL_CHAT_NONE. */
long rl_chat_jinja(enum rl_chat_family f, const char *dflt_system, char *out, size_t cap);
/* The text that ends the assistant's turn (a stop string for generation): "<|eot_id|>",
 * "<|im_end|>", "</s>", "<|end|>", "<end_of_turn>". */
const char *rl_chat_end(enum rl_chat_family f);

#endif
