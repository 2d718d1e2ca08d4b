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
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
			   "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
			   "<|start_header_id|>assistant<|end_header_id|>\n\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, su + 1, 1, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
			   "<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_CHATML, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"));
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, multi, 3, out, sizeof out) > 0 &&
	      !strcmp(out, "<s>[INST] A [/INST] B</s>[INST] C [/INST]"));
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<s>[INST] Be brief.\n\nHi! [/INST]"));
	/* the length needed, with a short buffer and with none */
	long need = rl_chat_format(RL_CHAT_LLAMA3, su, 2, NULL, 0);
	CHECK(need == (long)strlen("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
				   "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
				   "<|start_header_id|>assistant<|end_header_id|>\n\n"));
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, su, 2, out, 10) == need && strlen(out) == 9);
	/* refusals */
	const struct rl_chat_msg bad_role[] = { { "tool", "x" } }, two_users[] = { { "user", "a" }, { "user", "b" } };
	CHECK(rl_chat_format(RL_CHAT_LLAMA3, bad_role, 1, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, two_users, 2, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_MISTRAL, multi, 2, out, sizeof out) == -EINVAL);  /* ends with assistant */
	CHECK(rl_chat_format(RL_CHAT_NONE, su, 2, out, sizeof out) == -EINVAL);
	CHECK(rl_chat_format(RL_CHAT_PHI3, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n"));
	CHECK(!strcmp(rl_chat_end(RL_CHAT_PHI3), "<|end|>"));
	/* Gemma 3's: the system message opens the first user turn; the assistant is "model" */
	CHECK(rl_chat_format(RL_CHAT_GEMMA, su, 2, out, sizeof out) > 0 &&
	      !strcmp(out, "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\n"));
	CHECK(rl_chat_format(RL_CHAT_GEMMA, multi, 3, out, sizeof out) > 0 &&
	      !strcmp(out, "<bos><start_of_turn>user\nA<end_of_turn>\n<start_of_turn>model\nB<end_of_turn>\n"
			   "<start_of_turn>user\nC<end_of_turn>\n<start_of_turn>model\n"));
	CHECK(rl_chat_format(RL_CHAT_GEMMA, two_users, 2, out, sizeof out) == -EINVAL);
	CHECK(!strcmp(rl_chat_end(RL_CHAT_GEMMA), "<end_of_turn>"));
	CHECK(!strcmp(rl_chat_end(RL_CHAT_LLAMA3), "<|eot_id|>") && !strcmp(rl_chat_end(RL_CHAT_CHATML), "<|im_end|>"));
}

int main(void)
{
	RUN(chat_detects_families);
	RUN(chat_formats_like_the_templates);
	TEST_MAIN_END();
}
