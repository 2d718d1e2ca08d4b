/* rl_pretok.c — the pre-tokenizer table and splitter (see rl_pretok.h). Reference behaviour:
 * llama.cpp 0c1e570's llama-vocab.cpp (the table) and unicode.cpp (unicode_regex_split); the
 * oracle is tests/fixtures/llamacpp/pretok.json, llama.cpp's own ids for every name. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/rl_pretok.h"

/* the split expressions of each pre-tokenizer type, applied in order (llama-vocab.cpp) */
static const char *const X_LLAMA3[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_JAIS2[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
	NULL };
static const char *const X_DEEPSEEK_LLM[] = {
	"[\r\n]",
	"\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
	"\\s?[!-/:-~！-／：-～‘-‟　-。]+",
	"\\s+$",
	"[一-龥ࠀ-一가-퟿]+",
	"\\p{N}+",
	NULL };
static const char *const X_DEEPSEEK3_LLM[] = {
	"\\p{N}{1,3}",
	"[一-龥぀-ゟ゠-ヿ]+",
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_SPARK2_5[] = {
	"\\p{N}{1,3}",
	"[一-龥぀-ゟ゠-ヿ]+",
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
	"\\p{N}",
	NULL };
static const char *const X_YOUTU[] = {
	"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_DEEPSEEK_CODER[] = {
	"[\r\n]",
	"\\s?\\p{L}+",
	"\\s?\\p{P}+",
	"[一-龥ࠀ-一가-퟿]+",
	"\\p{N}",
	NULL };
static const char *const X_FALCON[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|`]+",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	"[0-9][0-9][0-9]",
	NULL };
static const char *const X_STARCODER[] = {
	"\\p{N}",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	NULL };
static const char *const X_GPT2[] = {
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	NULL };
static const char *const X_QWEN2[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_QWEN35[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_PORO[] = {
	" ?[^(\\s|.,!?…。，、।۔،)]+",
	NULL };
static const char *const X_VIKING[] = {
	" ?[^(\\s|.,!?…。，、।۔،)]+",
	"\\p{N}",
	NULL };
static const char *const X_TEKKEN[] = {
	"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_CHAMELEON[] = {
	"<sentinel:[0-9]+>",
	"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
	"([\\t\\n]|    |  )",
	"\\p{N}",
	"[\\p{P}!-/:-@\\[-`{-~]",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	NULL };
static const char *const X_GPT4O[] = {
	"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_GRANITE_EMB_MULTI[] = {
	"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_TINY_AYA[] = {
	"\\d{1,3}(?=(?:\\d{3})*\\b)",
	"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_KIMI_K2[] = {
	"\\p{Han}+",
	NULL };
static const char *const X_SUPERBPE[] = {
	"\\p{N}+",
	"(?=(\\d{3})+(?!\\d))",
	NULL };
static const char *const X_BAILINGMOE[] = {
	"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_SEED_CODER[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_UFAKZEKA[] = {
	"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_AFMOE[] = {
	"\\p{AFMoE_digits}",
	"[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_LAGUNA[] = {
	"[^\\n]+|[\\n]+",
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_EXAONE_MOE[] = {
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_GEMMA4[] = {
	"[^\\n]+|[\\n]+",
	NULL };
static const char *const X_MINICPM5[] = {
	"\\p{N}{1,3}",
	"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	NULL };
static const char *const X_WHITESPACE[] = {
	"\\S+",
	NULL };
static const char *const X_DEFAULT[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|]+",
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
	"\\p{N}+",
	"[0-9][0-9][0-9]",
	NULL };

static const struct rl_pretok_def defs[] = {
	{ "default", X_DEFAULT, 0 },
	{ "minicpm5", X_MINICPM5, RL_PRE_IGNORE_MERGES },
	{ "llama3,llama-v3,llama-bpe,falcon3,falcon-h1,pixtral,midm-2.0,lfm2,jina-v5-nano", X_LLAMA3, RL_PRE_IGNORE_MERGES | RL_PRE_ADD_BOS },
	{ "deepseek-llm", X_DEEPSEEK_LLM, 0 },
	{ "deepseek-coder", X_DEEPSEEK_CODER, 0 },
	{ "deepseek-v3", X_DEEPSEEK3_LLM, 0 },
	{ "spark2_5", X_SPARK2_5, 0 },
	{ "youtu", X_YOUTU, RL_PRE_IGNORE_MERGES },
	{ "falcon", X_FALCON, 0 },
	{ "mpt", X_GPT2, 0 },
	{ "starcoder", X_STARCODER, 0 },
	{ "gpt-2,phi-2,jina-es,jina-de,gigachat,jina-v2-es,jina-v2-de,a.x-4.0,mellum,modern-bert", X_GPT2, 0 },
	{ "jais-2", X_JAIS2, 0 },
	{ "gemma4,granite-embed-multi-311m", X_GEMMA4, RL_PRE_ESCAPE_WS | RL_PRE_RAW | RL_PRE_NL_WHOLE },
	{ "sarvam-moe", X_GEMMA4, RL_PRE_ESCAPE_WS | RL_PRE_RAW },
	{ "jina-v1-en,jina-v2-code,roberta-bpe", X_GPT2, 0 },
	{ "whitespace", X_WHITESPACE, RL_PRE_RAW },
	{ "refact", X_STARCODER, 0 },
	{ "command-r", X_STARCODER, 0 },
	{ "qwen2,deepseek-r1-qwen,kormo,f2llmv2", X_QWEN2, 0 },
	{ "qwen35", X_QWEN35, 0 },
	{ "stablelm2", X_QWEN2, 0 },
	{ "olmo", X_GPT2, 0 },
	{ "dbrx", X_LLAMA3, 0 },
	{ "smaug-bpe", X_LLAMA3, 0 },
	{ "poro-chat", X_PORO, 0 },
	{ "chatglm-bpe", X_LLAMA3, RL_PRE_NO_BOS_ID },
	{ "glm4,glm5", X_LLAMA3, RL_PRE_IGNORE_MERGES | RL_PRE_NO_BOS_ID },
	{ "viking", X_VIKING, 0 },
	{ "jais", X_GPT2, 0 },
	{ "tekken", X_TEKKEN, RL_PRE_IGNORE_MERGES | RL_PRE_ADD_BOS },
	{ "smollm", X_STARCODER, 0 },
	{ "codeshell", X_STARCODER, 0 },
	{ "bloom", X_PORO, 0 },
	{ "gpt3-finnish", X_PORO, 0 },
	{ "exaone", X_STARCODER, 0 },
	{ "exaone4", X_GPT2, 0 },
	{ "exaone-moe", X_EXAONE_MOE, 0 },
	{ "chameleon", X_CHAMELEON, RL_PRE_ADD_BOS },
	{ "minerva-7b", X_STARCODER, 0 },
	{ "megrez", X_QWEN2, 0 },
	{ "gpt-4o,llama4,kanana2,talkie", X_GPT4O, 0 },
	{ "granite-embed-multi-97m", X_GRANITE_EMB_MULTI, RL_PRE_IGNORE_MERGES },
	{ "tiny_aya,cohere2moe", X_TINY_AYA, 0 },
	{ "superbpe", X_SUPERBPE, 0 },
	{ "trillion", X_GPT2, 0 },
	{ "granite-docling", X_GPT2, 0 },
	{ "bailingmoe,bailingmoe2,llada-moe", X_BAILINGMOE, 0 },
	{ "seed-coder", X_SEED_CODER, 0 },
	{ "hunyuan", X_QWEN2, 0 },
	{ "hunyuan-dense", X_DEEPSEEK3_LLM, 0 },
	{ "hy_v4", X_DEEPSEEK3_LLM, 0 },
	{ "joyai-llm", X_DEEPSEEK3_LLM, 0 },
	{ "kimi-k2", X_KIMI_K2, 0 },
	{ "ufakzeka", X_UFAKZEKA, 0 },
	{ "grok-2", X_QWEN2, 0 },
	{ "afmoe", X_AFMOE, 0 },
	{ "laguna", X_LAGUNA, 0 },
	{ "minimax-m2", X_GPT4O, 0 },
	{ "solar-open", X_QWEN2, 0 },
	{ "mellum2", X_STARCODER, 0 },
};

const struct rl_pretok_def *rl_pretok_find(const char *pre)
{
	size_t n = strlen(pre);
	for (size_t i = 0; i < sizeof defs / sizeof *defs; i++)
		for (const char *s = defs[i].names; s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL)
			if (!strncmp(s, pre, n) && (s[n] == ',' || !s[n]))
				return &defs[i];
	return NULL;
}

const struct rl_pretok_def *rl_pretok_def_at(size_t i)
{
	return i < sizeof defs / sizeof *defs ? &defs[i] : NULL;
}

/* ---- modes -------------------------------------------------------------------------- */

/* The expressions llama.cpp matches with hand-written code instead of std::regex, and the
 * Unicode regex each one stands for. Llama 3's "(?i:" becomes explicit classes: PCRE2's
 * caseless matching would also take U+017F for 's' and U+212A for 'k'. Kimi K2's class
 * intersections (&&[^\p{Han}]) become lookaheads. */
#define CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
static const struct { const char *expr, *as; } hand[] = {
	{ "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", NULL },
	{ "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	  CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
	{ CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL },
	{ CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL },
	{ CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL },
	{ "[^\\n]+|[\\n]+", NULL },
	{ "\\p{Han}+",
	  "\\p{Han}+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])*"
	  "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])+" CONTR "?|[^\\r\\n\\p{L}\\p{N}]?"
	  "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])+(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])*"
	  CONTR "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
	{ "\\p{AFMoE_digits}", "" },                    /* 'D' */
	{ "\\d{1,3}(?=(?:\\d{3})*\\b)", "" },           /* 'D' */
};

/* llama.cpp's collapsed categories: the \p{..} names it knows, the byte a non-ASCII code point
 * of the category becomes, and the category's ASCII members as a class body. */
enum { CAT_N = 0xD1, CAT_L, CAT_P, CAT_M, CAT_S, CAT_OTHER = 0xD0, CAT_WS = 0x0B };
static const struct { const char *name; int cat; } ucat[] = {
	{ "\\p{N}", CAT_N }, { "\\p{L}", CAT_L }, { "\\p{P}", CAT_P }, { "\\p{M}", CAT_M },
	{ "\\p{S}", CAT_S }, { "\\p{Lu}", CAT_L }, { "\\p{Ll}", CAT_L }, { "\\p{Lt}", CAT_L },
	{ "\\p{Lm}", CAT_L }, { "\\p{Lo}", CAT_L },
};
static const char *cat_ascii(int cat)
{
	switch (cat) {
	case CAT_N: return "0-9";
	case CAT_L: return "A-Za-z";
	case CAT_P: return "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}";
	case CAT_S: return "\\$\\+<->^`\\|\\~";
	default:    return "";
	}
}

static int has_ucat(const char *e)
{
	for (size_t i = 0; i < sizeof ucat / sizeof *ucat; i++)
		if (strstr(e, ucat[i].name))
			return 1;
	return 0;
}

size_t rl_pretok_spec(const char *const *exprs, int llama, char *out, size_t cap)
{
	size_t n = 0;
	for (; *exprs; exprs++) {
		const char *e = *exprs;
		char mode = 'U';
		if (llama) {
			size_t h = 0;
			while (h < sizeof hand / sizeof *hand && strcmp(hand[h].expr, e))
				h++;
			if (h < sizeof hand / sizeof *hand) {
				e = hand[h].as ? hand[h].as : e;
				mode = *e ? 'U' : 'D';
			} else {
				mode = has_ucat(e) ? 'C' : 'W';
			}
		}
		size_t l = strlen(e);
		if (n + l + 2 <= cap) {
			out[n] = mode;
			memcpy(out + n + 1, e, l + 1);
		}
		n += l + 2;
	}
	return n;
}

/* ---- code points and categories ------------------------------------------------------ */

static int is_ws(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
	       c == 0x205F || c == 0x3000;
}

static int put_u8(uint32_t c, uint8_t *o)
{
	if (c < 0x80) { o[0] = (uint8_t)c; return 1; }
	if (c < 0x800) { o[0] = 0xC0 | c >> 6; o[1] = 0x80 | (c & 0x3F); return 2; }
	if (c < 0x10000) { o[0] = 0xE0 | c >> 12; o[1] = 0x80 | (c >> 6 & 0x3F); o[2] = 0x80 | (c & 0x3F); return 3; }
	o[0] = 0xF0 | c >> 18; o[1] = 0x80 | (c >> 12 & 0x3F); o[2] = 0x80 | (c >> 6 & 0x3F); o[3] = 0x80 | (c & 0x3F);
	return 4;
}

/* The next code point of s[0..n) and its length; an invalid sequence is one byte of U+FFFD
 * (llama.cpp's unicode_cpts_from_utf8). */
static uint32_t get_u8(const uint8_t *s, size_t n, size_t *k)
{
	uint32_t c = s[0];
	size_t need = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 9;
	*k = 1;
	if (!need)
		return c;
	if (need == 9 || need >= n)
		return 0xFFFD;
	c &= 0x3F >> need;
	for (size_t i = 1; i <= need; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0xFFFD;
		c = c << 6 | (s[i] & 0x3F);
	}
	*k = need + 1;
	return c;
}

static pcre2_code *cat_re;
static pthread_once_t cat_once = PTHREAD_ONCE_INIT;
static void cat_init(void)
{
	int ec;
	PCRE2_SIZE eo;
	cat_re = pcre2_compile((PCRE2_SPTR)"(\\p{N})|(\\p{L})|(\\p{P})|(\\p{M})|(\\p{S})", PCRE2_ZERO_TERMINATED,
			       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
}

/* The collapsed byte of a code point (ASCII stays itself). */
static int cat_of(uint32_t c, pcre2_match_data *md)
{
	if (c < 0x80)
		return (int)c;
	if (is_ws(c))
		return CAT_WS;
	uint8_t u[4];
	int l = put_u8(c, u);
	if (!cat_re || pcre2_match(cat_re, u, l, 0, 0, md, NULL) < 0)
		return CAT_OTHER;
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
	static const int by_group[] = { CAT_N, CAT_L, CAT_P, CAT_M, CAT_S };
	for (int g = 1; g <= 5; g++)
		if (ov[2 * g] != PCRE2_UNSET)
			return by_group[g - 1];
	return CAT_OTHER;
}

static int is_number(uint32_t c, pcre2_match_data *md)
{
	return c < 0x80 ? c >= '0' && c <= '9' : cat_of(c, md) == CAT_N;
}

/* ---- compiling --------------------------------------------------------------------- */

struct expr { char mode; pcre2_code *re; };
struct rl_pretok { uint32_t n; struct expr *x; };

#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* 'U': \s and \S as the White_Space set (llama.cpp's whitespace and Hugging Face's \s). */
static char *rewrite_u(const char *e)
{
	size_t n = strlen(e), o = 0;
	char *r = malloc(n * (sizeof WS_CLASS + 3) + 1);
	if (!r)
		return NULL;
	int inside = 0;
	for (size_t i = 0; i < n; i++) {
		if (e[i] == '\\' && i + 1 < n) {
			if (e[i + 1] == 's' || e[i + 1] == 'S') {
				o += sprintf(r + o, "%s%s%s", inside ? "" : e[i + 1] == 'S' ? "[^" : "[",
					     WS_CLASS, inside ? "" : "]");
			} else {
				r[o++] = e[i];
				r[o++] = e[i + 1];
			}
			i++;
			continue;
		}
		if (e[i] == '[' && !inside)
			inside = 1;
		else if (e[i] == ']' && inside)
			inside = 0;
		r[o++] = e[i];
	}
	r[o] = 0;
	return r;
}

/* 'C': llama.cpp's collapsed regex, built the way unicode_regex_split builds it. */
static char *rewrite_c(const char *e)
{
	size_t n = strlen(e), o = 0;
	char *r = malloc(n * 32 + 1);
	if (!r)
		return NULL;
	int inside = 0;
	for (size_t i = 0; i < n; i++) {
		if (e[i] == '[' && (i == 0 || e[i - 1] != '\\')) {
			r[o++] = '[';
			inside = 1;
			continue;
		}
		if (inside && e[i] == ']' && e[i - 1] != '\\') {
			r[o++] = ']';
			inside = 0;
			continue;
		}
		if (e[i] == '\\' && i + 3 < n && e[i + 1] == 'p' && e[i + 2] == '{') {
			const char *cb = strchr(e + i + 3, '}');
			if (cb && (size_t)(cb - e) <= i + 10) {
				size_t k = 0, l = (size_t)(cb - e) - i + 1;
				while (k < sizeof ucat / sizeof *ucat &&
				       (strlen(ucat[k].name) != l || strncmp(ucat[k].name, e + i, l)))
					k++;
				if (k < sizeof ucat / sizeof *ucat) {
					o += sprintf(r + o, "%s%c%s%s", inside ? "" : "[", ucat[k].cat,
						     cat_ascii(ucat[k].cat), inside ? "" : "]");
					i = (size_t)(cb - e);
					continue;
				}
			}
		}
		r[o++] = e[i];
	}
	r[o] = 0;
	return r;
}

int rl_pretok_create(const char *spec, size_t len, struct rl_pretok **out, char *err, size_t errlen)
{
	*out = NULL;
	pthread_once(&cat_once, cat_init);
	struct rl_pretok *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++)
		p->n += !spec[i];
	if (!len || spec[len - 1] || p->n > 64) {
		snprintf(err, errlen, "tokenizer: malformed pre-tokenizer spec");
		free(p);
		return -EINVAL;
	}
	p->x = calloc(p->n, sizeof *p->x);
	if (!p->x) {
		free(p);
		return -ENOMEM;
	}
	const char *e = spec;
	for (uint32_t k = 0; k < p->n; k++, e += strlen(e) + 1) {
		struct expr *x = &p->x[k];
		x->mode = e[0];
		if (x->mode == 'D')
			continue;
		char *pat = x->mode == 'U' ? rewrite_u(e + 1) : x->mode == 'C' ? rewrite_c(e + 1) :
			    x->mode == 'W' ? strdup(e + 1) : NULL;
		if (!pat) {
			rl_pretok_destroy(p);
			snprintf(err, errlen, "tokenizer: pre-tokenizer expression %u has mode '%c'", k,
				 e[0] ? e[0] : '?');
			return -EINVAL;
		}
		uint32_t opt = PCRE2_DOLLAR_ENDONLY | (x->mode == 'C' ? 0 : PCRE2_UTF | PCRE2_MATCH_INVALID_UTF) |
			       (x->mode == 'U' ? PCRE2_UCP : 0);
		int ec;
		PCRE2_SIZE eo;
		x->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opt, &ec, &eo, NULL);
		free(pat);
		if (!x->re) {
			PCRE2_UCHAR m[128];
			pcre2_get_error_message(ec, m, sizeof m);
			snprintf(err, errlen, "tokenizer: pre-tokenizer expression %u does not compile at %zu: %s",
				 k, (size_t)eo, (const char *)m);
			rl_pretok_destroy(p);
			return -EINVAL;
		}
		pcre2_jit_compile(x->re, PCRE2_JIT_COMPLETE);   /* falls back to the interpreter */
	}
	*out = p;
	return 0;
}

void rl_pretok_destroy(struct rl_pretok *p)
{
	if (!p)
		return;
	for (uint32_t k = 0; k < p->n; k++)
		if (p->x[k].re)
			pcre2_code_free(p->x[k].re);
	free(p->x);
	free(p);
}

/* ---- splitting --------------------------------------------------------------------- */

/* One rendering of the text that a mode's regexes run over: its bytes, and for every byte
 * offset the code point it belongs to (at[nb] = the code point count). */
struct subj { uint8_t *b; uint32_t *at; size_t nb; };

struct split {
	const uint32_t *cp;
	size_t ncp;
	uint32_t *len, *nlen;          /* piece lengths in code points, current and next */
	size_t n, nn;
	struct subj s[3];              /* 'U' (the text), 'C' (collapsed), 'W' (wide) */
	pcre2_match_data *md;
};

static int subj_make(struct split *sp, int which)
{
	struct subj *s = &sp->s[which];
	if (s->b)
		return 0;
	s->b = malloc(sp->ncp * 4 + 1);
	s->at = malloc((sp->ncp * 4 + 1) * sizeof *s->at);
	if (!s->b || !s->at)
		return -ENOMEM;
	size_t o = 0;
	for (size_t i = 0; i < sp->ncp; i++) {
		uint32_t c = sp->cp[i];
		int l;
		if (which == 1) {
			s->b[o] = (uint8_t)cat_of(c, sp->md);
			l = 1;
		} else {
			l = put_u8(which == 2 && c > 0x7F && is_ws(c) ? 0x0B : c, s->b + o);
		}
		for (int k = 0; k < l; k++)
			s->at[o + k] = (uint32_t)i;
		o += l;
	}
	s->at[o] = (uint32_t)sp->ncp;
	s->nb = o;
	return 0;
}

static void push(struct split *sp, size_t n)
{
	if (n)
		sp->nlen[sp->nn++] = (uint32_t)n;
}

/* llama.cpp's digit groups: in each piece, a run of n digits ends cuts at n % 3, then every
 * 3; the text before a run joins its first group. */
static void split_digits(struct split *sp, size_t s0, size_t len)
{
	size_t prev = s0, end = s0 + len;
	for (size_t pos = s0; pos < end;) {
		if (!is_number(sp->cp[pos], sp->md)) {
			pos++;
			continue;
		}
		size_t ds = pos;
		while (pos < end && is_number(sp->cp[pos], sp->md))
			pos++;
		size_t cnt = pos - ds, cur = ds;
		if (cnt % 3) {
			push(sp, cur + cnt % 3 - prev);
			prev = cur += cnt % 3;
		}
		while (cur < ds + cnt) {
			push(sp, cur + 3 - prev);
			prev = cur += 3;
		}
	}
	push(sp, end - prev);
}

/* One piece through one regex, as std::regex_iterator walks it: every match a piece, the
 * text between matches a piece; after an empty match, a non-empty one at the same place or
 * else the search goes on one character later. */
static int split_re(struct split *sp, const struct expr *x, size_t s0, size_t len)
{
	struct subj *s = &sp->s[x->mode == 'U' ? 0 : x->mode == 'C' ? 1 : 2];
	/* the piece's bytes: code points [s0, s0 + len) */
	size_t b0 = 0, b1;
	if (x->mode == 'C') {
		b0 = s0;
		b1 = s0 + len;
	} else {
		size_t lo = 0, hi = s->nb;                 /* first byte of code point s0 */
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (s->at[mid] < s0) lo = mid + 1; else hi = mid;
		}
		b0 = lo;
		for (b1 = b0; b1 < s->nb && s->at[b1] < s0 + len; b1++)
			;
	}
	const uint8_t *sub = s->b + b0;
	size_t n = b1 - b0, pos = 0, last = 0;
	uint32_t opt = 0;
	for (;;) {
		int rc = pos <= n ? pcre2_match(x->re, sub, n, pos, opt, sp->md, NULL) : PCRE2_ERROR_NOMATCH;
		if (rc == PCRE2_ERROR_NOMATCH) {
			if (!opt || pos >= n)
				break;
			pos += x->mode == 'C' ? 1 : 1 + (sub[pos] >= 0xC0) + (sub[pos] >= 0xE0) + (sub[pos] >= 0xF0);
			opt = 0;
			continue;
		}
		if (rc < 0)
			return -EINVAL;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sp->md);
		size_t ms = ov[0], me = ov[1];
		if (ms > last)
			push(sp, s->at[b0 + ms] - s->at[b0 + last]);
		push(sp, s->at[b0 + me] - s->at[b0 + ms]);
		last = pos = me;
		opt = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
	}
	if (last < n)
		push(sp, s->at[b0 + n] - s->at[b0 + last]);
	return 0;
}

int rl_pretok_split(const struct rl_pretok *p, const char *text, size_t len,
		    int (*word)(void *ctx, const uint8_t *w, size_t n), void *ctx)
{
	if (!len)
		return 0;
	struct split sp = { 0 };
	uint32_t *cp = malloc(len * sizeof *cp);
	sp.len = malloc(len * sizeof *sp.len);
	sp.nlen = malloc(len * sizeof *sp.nlen);
	sp.md = pcre2_match_data_create(32, NULL);
	int rc = -ENOMEM;
	if (!cp || !sp.len || !sp.nlen || !sp.md)
		goto out;
	for (size_t i = 0, k; i < len; i += k)
		cp[sp.ncp++] = get_u8((const uint8_t *)text + i, len - i, &k);
	sp.cp = cp;
	sp.len[sp.n++] = (uint32_t)sp.ncp;
	if ((rc = subj_make(&sp, 0)))
		goto out;
	for (uint32_t k = 0; k < p->n; k++) {
		const struct expr *x = &p->x[k];
		if ((x->mode == 'C' && (rc = subj_make(&sp, 1))) || (x->mode == 'W' && (rc = subj_make(&sp, 2))))
			goto out;
		sp.nn = 0;
		for (size_t i = 0, s0 = 0; i < sp.n; s0 += sp.len[i++]) {
			if (x->mode == 'D')
				split_digits(&sp, s0, sp.len[i]);
			else if ((rc = split_re(&sp, x, s0, sp.len[i])))
				goto out;
		}
		uint32_t *t = sp.len;
		sp.len = sp.nlen;
		sp.nlen = t;
		sp.n = sp.nn;
	}
	/* the words, as the 'U' rendering's bytes (code points re-encoded) */
	size_t b = 0;
	for (size_t i = 0, s0 = 0; i < sp.n && !rc; s0 += sp.len[i++]) {
		size_t e = b;
		while (e < sp.s[0].nb && sp.s[0].at[e] < s0 + sp.len[i])
			e++;
		rc = word(ctx, sp.s[0].b + b, e - b);
		b = e;
	}
out:
	for (int i = 0; i < 3; i++) {
		free(sp.s[i].b);
		free(sp.s[i].at);
	}
	pcre2_match_data_free(sp.md);
	free(cp);
	free(sp.len);
	free(sp.nlen);
	return rc;
}
