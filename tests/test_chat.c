/* test_chat.c — chat template families (tokenizer/rl_chat.c): detection from the marker tokens
 * of the real templates' text, and the formatted prompt each family's template renders for
 * the same conversations (written out by hand from the published templates: Llama 3.0,
 * Qwen2's ChatML with its default system message, Mistral v1), and the refusals.
 * Tests: tokenizer (rl_chat). */
#include <errno.h>
#include "tests/rl_test.h"
#include "tokenizer/rl_chat.h"

static void chat_detects_families(void)
{
	/* excerpts of the templates as the models' files carry them */
	CHECK(rl_chat_detect("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
			     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
			     "+ '<|eot_id|>' %}") == RL_CHAT_LLAMA3);
	CHECK(rl_chat_detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
			     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}") == RL_CHAT_CHATML);
	CHECK(rl_chat_detect("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
			     "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}") == RL_CHAT_MISTRAL);
	CHECK(rl_chat_detect("{% for m in messages %}<|user|>{{ m.content }}{% endfor %}") == RL_CHAT_NONE);
	CHECK(rl_chat_detect(NULL) == RL_CHAT_NONE);
	/* Phi-3-mini-4k-instruct's */
	CHECK(rl_chat_detect("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + "
			     "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + "
			     "message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + "
			     "message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}"
			     "{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}") == RL_CHAT_PHI3);
	for (int f = RL_CHAT_LLAMA3; f <= RL_CHAT_LAST; f++) {
		CHECK(rl_chat_from_name(rl_chat_name(f)) == f);
		CHECK(rl_chat_detect(rl_chat_template_text(f)) == f);   /* what mkmodel writes */
	}
}

static void chat_formats_like_the_templates(void)
{
	const struct rl_chat_msg su[] = { { "system", "Be brief." }, { "user", "Hi!" } };
	const struct rl_chat_msg multi[] = { { "user", "A" }, { "assistant", "B" }, { "user", "C" } };
	char out[1024];
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, NULL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
			   "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
			   "<|start_header_id|>assistant<|end_header_id|>\n\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, "You are a helpful assistant.", su + 1, 1, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
			   "<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, NULL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, NULL, multi, 3, out, sizeof out) > 0 &&
	      !strcmp(out, "<s>[INST] A [/INST] B</s>[INST] C [/INST]"));
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, NULL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<s>[INST] Be brief.\n\nHi! [/INST]"));
	/* the length needed, with a short buffer and with none */
	long need = rl_chat_format(RL_CHAT_LLAMA3, NULL, su, 2, NULL, 0);
	CHECK(need == (long)strlen("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
				   "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
				   "<|start_header_id|>assistant<|end_header_id|>\n\n"));
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, NULL, su, 2, out, 10) == need && strlen(out) == 9);
	/* refusals */
	const struct rl_chat_msg bad_role[] = { { "tool", "x" } }, two_users[] = { { "user", "a" }, { "user", "b" } };
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, NULL, bad_role, 1, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, NULL, two_users, 2, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, NULL, multi, 2, out, sizeof out) == -EINVAL);  /* ends with assistant */
	CHECK(rl_chat_format(RL_CHAT_NONE, NULL, su, 2, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_PHI3, NULL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n"));
	CHECK(!strcmp(rl_chat_end(RL_CHAT_PHI3), "<|end|>"));
	/* Gemma 3's: the system message opens the first user turn; the assistant is "model" */
	CHECK(rl_chat_format(RL_CHAT_GEMMA, NULL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\n"));
	CHECK(rl_chat_format(RL_CHAT_GEMMA, NULL, multi, 3, out, sizeof out) > 0 &&
	      !strcmp(out, "<bos><start_of_turn>user\nA<end_of_turn>\n<start_of_turn>model\nB<end_of_turn>\n"
			   "<start_of_turn>user\nC<end_of_turn>\n<start_of_turn>model\n"));
	CHECK(rl_chat_format(RL_CHAT_GEMMA, NULL, two_users, 2, out, sizeof out) == -EINVAL);
	CHECK(!strcmp(rl_chat_end(RL_CHAT_GEMMA), "<end_of_turn>"));
	CHECK(!strcmp(rl_chat_end(RL_CHAT_LLAMA3), "<|eot_id|>") && !strcmp(rl_chat_end(RL_CHAT_CHATML), "<|im_end|>"));
}

/* The default system turn a ChatML template spells out: Qwen2's (escaped \n, as its
 * tokenizer_config.json has it) and SmolLM2's (a real newline, as its GGUF has it); none where
 * the template writes the conversation's own (Qwen3's) or none at all. A ChatML conversation
 * without a system message opens with it, one with a system message keeps its own. */
static void chatml_default_system_from_the_template(void)
{
	char sys[192], out[512];
	CHECK(rl_chat_default_system("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
				     "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}",
				     sys, sizeof sys) == 28 && !strcmp(sys, "You are a helpful assistant."));
	CHECK(rl_chat_default_system("{{'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
				     "Hugging Face<|im_end|>\n' }}", sys, sizeof sys) > 0 &&
	      !strcmp(sys, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
	CHECK(rl_chat_default_system("{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}", sys,
				     sizeof sys) == 0 && !sys[0]);
	CHECK(rl_chat_default_system(NULL, sys, sizeof sys) == 0 && !sys[0]);
	CHECK(rl_chat_default_system("<|im_start|>system\\nLong text<|im_end|>", sys, 5) == 4 && !strcmp(sys, "Long"));
	const struct rl_chat_msg u[] = { { "user", "Hi" } }, su[] = { { "system", "Mine." }, { "user", "Hi" } };
	CHECK(rl_chat_format(RL_CHAT_CHATML, "Default.", u, 1, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nDefault.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, "Default.", su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nMine.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, "", u, 1, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
}

int main(void)
{
	RUN(chat_detects_families);
	RUN(chat_formats_like_the_templates);
	RUN(chatml_default_system_from_the_template);
	TEST_MAIN_END();
}
