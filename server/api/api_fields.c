/*
 * api_fields.c: request fields xlserve knows but does not implement, and that would change the
 * output if a server honoured them: llama.cpp's and vLLM's sampling and template extensions,
 * and OpenAI fields that need something else (tool_choice without tools). Such a field gets a
 * 400 naming it instead of being silently ignored. A field at its neutral value (the value that
 * changes nothing, e.g. "ignore_eos": false) passes, since some clients always send it.
 * OpenAI's own optional fields that do not change the text (user, metadata, store,
 * service_tier, parallel_tool_calls...) are ignored, as is any unknown field.
 * Thread: any (pure).
 */
#include "api_fields.h"

#include <string.h>

enum { FOR_COMPLETIONS = 1, FOR_CHAT = 2, FOR_BOTH = 3 };

typedef struct refused_field {
  const char *name;
  int kinds;
  const char *neutral; /* JSON of the value that changes nothing; NULL: any non-null refused */
  const char *instead; /* what to use instead ("" = nothing) */
} refused_field;

static const refused_field REFUSED[] = {
    /* llama.cpp server */
    {"n_predict", FOR_BOTH, NULL, "use 'max_tokens'"},
    {"n_probs", FOR_BOTH, "0", "use 'logprobs'"},
    {"n_keep", FOR_BOTH, NULL, ""},
    {"mirostat", FOR_BOTH, "0", ""},
    {"mirostat_tau", FOR_BOTH, NULL, ""},
    {"mirostat_eta", FOR_BOTH, NULL, ""},
    {"typical_p", FOR_BOTH, "1", ""},
    {"tfs_z", FOR_BOTH, "1", ""},
    {"repeat_penalty", FOR_BOTH, "1", "use 'repetition_penalty'"},
    {"repeat_last_n", FOR_BOTH, NULL, ""},
    {"penalize_nl", FOR_BOTH, NULL, ""},
    {"penalty_last_n", FOR_BOTH, NULL, ""},
    {"dynatemp_range", FOR_BOTH, "0", ""},
    {"dynatemp_exponent", FOR_BOTH, "1", ""},
    {"xtc_probability", FOR_BOTH, "0", ""},
    {"xtc_threshold", FOR_BOTH, NULL, ""},
    {"dry_multiplier", FOR_BOTH, "0", ""},
    {"dry_base", FOR_BOTH, NULL, ""},
    {"dry_allowed_length", FOR_BOTH, NULL, ""},
    {"dry_penalty_last_n", FOR_BOTH, NULL, ""},
    {"dry_sequence_breakers", FOR_BOTH, NULL, ""},
    {"samplers", FOR_BOTH, NULL, ""},
    {"grammar", FOR_BOTH, NULL, ""},
    {"ignore_eos", FOR_BOTH, "false", ""},
    {"t_max_predict_ms", FOR_BOTH, NULL, ""},
    /* vLLM */
    {"guided_regex", FOR_BOTH, NULL, ""},
    {"guided_choice", FOR_BOTH, NULL, ""},
    {"guided_grammar", FOR_BOTH, NULL, ""},
    {"use_beam_search", FOR_BOTH, "false", ""},
    {"length_penalty", FOR_BOTH, "1", ""},
    {"min_tokens", FOR_BOTH, "0", ""},
    {"stop_token_ids", FOR_BOTH, "[]", "use 'stop' strings"},
    {"bad_words", FOR_BOTH, "[]", ""},
    {"include_stop_str_in_output", FOR_BOTH, "false", ""},
    {"truncate_prompt_tokens", FOR_BOTH, NULL, ""},
    {"allowed_token_ids", FOR_BOTH, NULL, ""},
    {"continue_final_message", FOR_CHAT, "false", ""},
    {"add_generation_prompt", FOR_CHAT, "true", ""},
    {"chat_template", FOR_CHAT, NULL, "the server's template is fixed (chat_template option)"},
    {"chat_template_kwargs", FOR_CHAT, NULL, ""},
    {"documents", FOR_CHAT, NULL, ""},
    {"echo", FOR_CHAT, "false", "use /v1/completions with 'echo'"},
    /* OpenAI fields that need something xlserve does not have */
    {"prediction", FOR_BOTH, NULL, ""},
    {"audio", FOR_CHAT, NULL, ""},
};

static int json_same(json_t *a, json_t *b) {
  if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
  return json_equal(a, b);
}

static int is_neutral(json_t *v, const char *neutral) {
  if (!neutral) return 0;
  json_t *n = json_loads(neutral, JSON_DECODE_ANY, NULL);
  int same = n && json_same(v, n);
  json_decref(n);
  return same;
}

int api_refuse_unimplemented(json_t *root, job_kind kind, api_error *e) {
  int mask = kind == JOB_CHAT ? FOR_CHAT : FOR_COMPLETIONS;
  for (size_t i = 0; i < sizeof REFUSED / sizeof *REFUSED; i++) {
    const refused_field *f = &REFUSED[i];
    if (!(f->kinds & mask)) continue;
    json_t *v = json_object_get(root, f->name);
    if (!v || json_is_null(v) || is_neutral(v, f->neutral)) continue;
    api_error_set(e, API_ERR_UNSUPPORTED_FIELD, f->name,
                  "'%s' is not supported by this server%s%s", f->name, *f->instead ? ": " : "",
                  f->instead);
    return -1;
  }
  json_t *tc = json_object_get(root, "tool_choice");
  json_t *tools = json_object_get(root, "tools");
  if (tc && !json_is_null(tc) && !(json_is_array(tools) && json_array_size(tools) > 0)) {
    /* OpenAI: tool_choice is only allowed when tools are given; "none" is harmless */
    if (!(json_is_string(tc) && !strcmp(json_string_value(tc), "none"))) {
      api_error_set(e, API_ERR_INVALID_VALUE, "tool_choice",
                    "'tool_choice' is only allowed when 'tools' are specified");
      return -1;
    }
  }
  json_t *mod = json_object_get(root, "modalities");
  if (mod && !json_is_null(mod)) {
    int text_only = json_is_array(mod) && json_array_size(mod) > 0;
    for (size_t i = 0; text_only && i < json_array_size(mod); i++) {
      json_t *m = json_array_get(mod, i);
      text_only = json_is_string(m) && !strcmp(json_string_value(m), "text");
    }
    if (!text_only) {
      api_error_set(e, API_ERR_UNSUPPORTED_FIELD, "modalities",
                    "only 'modalities': [\"text\"] is supported");
      return -1;
    }
  }
  return 0;
}
