/*
 * test_core_tokenizers.c: the tokenizer kinds of config.json. transfo_xl against cases worked
 * out by hand from the Moses rules (punctuation, numbers, dashes, quotes, contractions,
 * abbreviations, ellipses, URLs, special tokens, newlines), its decoder back to text, and its
 * streaming decoder (what it has emitted is never changed by later tokens; the stream equals
 * the whole decode); byte_table and char_table round trips, refusals and the drop option; bad
 * options refused at load.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* A random model whose tokenizer is `kind` with `options` (a JSON object or NULL) over the
 * given symbols (padded with filler symbols to 64). */
static xl_model *make(const char *tag, const char *kind, const char *options,
                      const char *const *syms, int nsyms, xl_error *err) {
  const char *dir = tl_tmpdir(tag);
  tl_model_spec spec = TL_MODEL_SPEC_DEFAULT;
  spec.words = 1;
  spec.vocab = nsyms < 64 ? 64 : nsyms;
  if (tl_write_model(dir, &spec)) return NULL;
  char path[1024], cfg[8192];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t n = fread(cfg, 1, sizeof cfg - 1, f);
  fclose(f);
  cfg[n] = 0;
  char *at = strstr(cfg, "\"xlserve_tokenizer\": \"words\"}");
  if (!at) return NULL;
  snprintf(at, sizeof cfg - (size_t)(at - cfg),
           "\"xlserve_tokenizer\": \"%s\", \"xlserve_tokenizer_options\": %s}\n", kind,
           options ? options : "null");
  tl_write_file(path, cfg, strlen(cfg));
  snprintf(path, sizeof path, "%s/vocab.txt", dir);
  f = fopen(path, "wb");
  if (!f) return NULL;
  for (int i = 0; i < spec.vocab; i++) {
    if (i < nsyms) fprintf(f, "%s\n", syms[i]);
    else fprintf(f, "filler%d\n", i);
  }
  fclose(f);
  xl_model *m = NULL;
  if (xl_model_load(dir, NULL, &m, err) != XL_OK) return NULL;
  return m;
}

/* The symbols of text's tokens, space-separated ("ERR: message" on a refusal). */
static const char *enc(const xl_model *m, const char *text) {
  static char out[4096];
  int32_t *ids = NULL;
  size_t n = 0;
  xl_error err;
  if (xl_tokenize(m, text, strlen(text), &ids, &n, &err) != XL_OK) {
    snprintf(out, sizeof out, "ERR: %s", err.message);
    return out;
  }
  size_t w = 0;
  out[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s = xl_token_symbol(m, ids[i]);
    w += (size_t)snprintf(out + w, sizeof out - w, "%s%s", i ? " " : "", s ? s : "?");
  }
  free(ids);
  return out;
}

/* Decodes ids one push at a time (cap: room for all of it, > 64 + 2 x the longest symbol). */
static size_t stream_decode(const xl_model *m, const int32_t *ids, size_t n, char *out,
                            size_t cap) {
  xl_detok d;
  xl_detok_init(&d);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) w += xl_detok_push(m, &d, ids[i], out + w, cap - 1 - w);
  w += xl_detok_flush(m, &d, out + w, cap - 1 - w);
  out[w] = 0;
  return w;
}

/* Decodes space-separated symbols (each must be in the vocabulary). */
static const char *dec(const xl_model *m, const char *syms) {
  static char out[8192];
  int32_t ids[256];
  size_t n = 0;
  char copy[2048];
  snprintf(copy, sizeof copy, "%s", syms);
  for (char *save = NULL, *t = strtok_r(copy, " ", &save); t && n < 256;
       t = strtok_r(NULL, " ", &save)) {
    int32_t id = -1;
    for (int i = 0; i < xl_model_config(m)->vocab_size; i++)
      if (!strcmp(xl_token_symbol(m, i), t)) id = i;
    if (id < 0) {
      snprintf(out, sizeof out, "NOT IN VOCAB: %s", t);
      return out;
    }
    ids[n++] = id;
  }
  stream_decode(m, ids, n, out, sizeof out);
  return out;
}

static const char *const WT_SYMS[] = {
    "<eos>", "<unk>", "<formula>", "Hello", ",", "world", "!", "Hi", "How", "are", "you", "?",
    "It", "costs", "$", "1", "@,@", "000", "@.@", "50", "today", ".", "state", "@-@", "of",
    "the", "art", "said", "\"", "yes", "to", "me", "I", "don", "'t", "know", "Wait", "...",
    "what", "Mr.", "Smith", "went", "Washington", "(", ")", "see", "https", ":", "/",
    "example.com", "a", "b", "c", "3", "5", "'", "s", "Jones", "house", "--", "well", "known",
    "hello", "<Unk>", "&amp;", "&quot;", "Quoted", "text", "-", "dash", "'s", "John", "A", "B",
    "\xE6\x97\xA5", "\xE6\x9C\xAC", "x"};
#define N_WT (int)(sizeof WT_SYMS / sizeof *WT_SYMS)

static void test_transfo_xl_encode(void) {
  xl_error err;
  xl_model *m = make("tx_enc", "transfo_xl", NULL, WT_SYMS, N_WT, &err);
  if (!m) {
    fprintf(stderr, "load: %s\n", err.message);
    CHECK(0);
    return;
  }
  CHECK(xl_model_tokenizer(m)->kind == XL_TOKENIZER_TRANSFO_XL);
  CHECK(!strcmp(enc(m, "Hello, world!"), "Hello , world !"));
  CHECK(!strcmp(enc(m, "Hi! How are you?"), "Hi ! How are you ?"));
  CHECK(!strcmp(enc(m, "It costs $1,000.50 today."),
                "It costs $ 1 @,@ 000 @.@ 50 today ."));
  CHECK(!strcmp(enc(m, "3.5"), "3 @.@ 5"));
  CHECK(!strcmp(enc(m, "state-of-the-art"), "state @-@ of @-@ the @-@ art"));
  CHECK(!strcmp(enc(m, "well -- known"), "well -- known"));
  CHECK(!strcmp(enc(m, "I said \"yes\" to me."), "I said \" yes \" to me ."));
  CHECK(!strcmp(enc(m, "I don't know."), "I don 't know ."));
  CHECK(!strcmp(enc(m, "Wait... what?"), "Wait ... what ?"));
  CHECK(!strcmp(enc(m, "Mr. Smith went to Washington."), "Mr. Smith went to Washington ."));
  /* "A." is an abbreviation (single capital), "c." is not */
  CHECK(!strcmp(enc(m, "a b c."), "a b c ."));
  CHECK(!strcmp(enc(m, "see https://example.com/a-b"),
                "see https : / / example.com / a @-@ b"));
  /* special tokens kept whole wherever they are; other case variants are words */
  CHECK(!strcmp(enc(m, "a <unk> b<formula>c"), "a <unk> b <formula> c"));
  /* newline -> <eos>; none after a last line without newline */
  CHECK(!strcmp(enc(m, "Hello.\nBye\n"), "Hello . <eos> <unk> <eos>"));
  CHECK(!strcmp(enc(m, "\n\n"), "<eos> <eos>"));
  CHECK(!strcmp(enc(m, ""), ""));
  /* Moses' normalisation: curly quotes, en dash, spaces before punctuation */
  CHECK(!strcmp(enc(m, "\xE2\x80\x9CQuoted\xE2\x80\x9D text \xE2\x80\x93 dash"),
                "\" Quoted \" text - dash"));
  CHECK(!strcmp(enc(m, "Hello , world !"), "Hello , world !"));
  CHECK(!strcmp(enc(m, "(Hello)"), "( Hello )"));
  /* sacremoses' classes leave CJK ideographs out of IsAlnum: each is split off */
  CHECK(!strcmp(enc(m, "x\xE6\x97\xA5\xE6\x9C\xAC" "1"), "x \xE6\x97\xA5 \xE6\x9C\xAC 1"));
  CHECK(!strcmp(dec(m, "x \xE6\x97\xA5 \xE6\x9C\xAC 1"), "x \xE6\x97\xA5\xE6\x9C\xAC 1"));
  /* words outside the vocabulary are <unk>; nothing is refused */
  CHECK(!strcmp(enc(m, "Zebra crossing"), "<unk> <unk>"));
  xl_model_free(m);

  static const char *const L_SYMS[] = {"<eos>", "<unk>", "hello", "world", "<formula>", "."};
  m = make("tx_low", "transfo_xl", "{\"lower_case\": true}", L_SYMS, 6, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  CHECK(!strcmp(enc(m, "HELLO World."), "hello world ."));
  CHECK(!strcmp(enc(m, "Hello <formula> world"), "hello <formula> world"));
  xl_model_free(m);
  m = make("tx_delim", "transfo_xl", "{\"delimiter\": \"\"}", L_SYMS, 6, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  CHECK(!strcmp(enc(m, " hello "), "<unk> <unk> <unk> <unk> <unk>"));
  xl_model_free(m);
}

static void test_transfo_xl_decode(void) {
  xl_error err;
  xl_model *m = make("tx_dec", "transfo_xl", NULL, WT_SYMS, N_WT, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  CHECK(!strcmp(dec(m, "Hello , world !"), "Hello, world!"));
  CHECK(!strcmp(dec(m, "Hi ! How are you ?"), "Hi! How are you?"));
  CHECK(!strcmp(dec(m, "It costs $ 1 @,@ 000 @.@ 50 today ."), "It costs $1,000.50 today."));
  CHECK(!strcmp(dec(m, "state @-@ of @-@ the @-@ art"), "state-of-the-art"));
  CHECK(!strcmp(dec(m, "I said \" yes \" to me ."), "I said \"yes\" to me."));
  CHECK(!strcmp(dec(m, "I don 't know ."), "I don't know."));
  CHECK(!strcmp(dec(m, "Wait ... what ?"), "Wait... what?"));
  CHECK(!strcmp(dec(m, "( Hello )"), "(Hello)"));
  CHECK(!strcmp(dec(m, "Jones ' house"), "Jones' house"));
  CHECK(!strcmp(dec(m, "John 's house"), "John's house"));
  CHECK(!strcmp(dec(m, "' yes '"), "'yes'"));
  CHECK(!strcmp(dec(m, "&amp; &quot; yes &quot;"), "& \"yes\""));
  /* each line on its own; <eos> is a newline */
  CHECK(!strcmp(dec(m, "Hello . <eos> \" yes <eos> \" yes \""), "Hello.\n\"yes\n\"yes\""));
  /* number joins need spaces on both sides, as in Hugging Face's rule */
  CHECK(!strcmp(dec(m, "1 @,@ ."), "1 @,@."));
  CHECK(!strcmp(dec(m, "@-@ a"), "-a"));
  CHECK(!strcmp(dec(m, "a @-@ @-@ b"), "a-@-@ b"));
  xl_model_free(m);
}

/* Round trips: text -> ids -> text gives the text back for these. */
static void test_transfo_xl_round_trip(void) {
  xl_error err;
  xl_model *m = make("tx_rt", "transfo_xl", NULL, WT_SYMS, N_WT, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  static const char *const texts[] = {"Hello, world!", "Hi! How are you?",
                                      "It costs $1,000.50 today.", "state-of-the-art",
                                      "I said \"yes\" to me.", "I don't know.", "Wait... what?",
                                      "Mr. Smith went to Washington.", "(Hello)\nHi!\n"};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    int32_t *ids;
    size_t n;
    CHECK_CODE(xl_tokenize(m, texts[i], strlen(texts[i]), &ids, &n, &err), XL_OK);
    static char out[8192];
    stream_decode(m, ids, n, out, sizeof out);
    if (strcmp(out, texts[i])) fprintf(stderr, "round trip: '%s' -> '%s'\n", texts[i], out);
    CHECK(!strcmp(out, texts[i]));
    free(ids);
  }
  xl_model_free(m);
}

/* What the streaming decoder has emitted after k tokens is a prefix of the final text, and the
 * final text is the same however the stream is cut. */
static void test_transfo_xl_streaming(void) {
  xl_error err;
  xl_model *m = make("tx_stream", "transfo_xl", NULL, WT_SYMS, N_WT, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  uint64_t s = 12345;
  int bad = 0;
  for (int trial = 0; trial < 3000 && !bad; trial++) {
    int32_t ids[40];
    size_t n = 1 + (size_t)(trial % 40);
    for (size_t i = 0; i < n; i++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      ids[i] = (int32_t)((s >> 33) % N_WT);
    }
    static char whole[65536], prefix[65536];
    size_t wn = stream_decode(m, ids, n, whole, sizeof whole);
    xl_detok d;
    xl_detok_init(&d);
    size_t pn = 0;
    for (size_t i = 0; i < n && !bad; i++) {
      pn += xl_detok_push(m, &d, ids[i], prefix + pn, 4096);
      if (pn > wn || memcmp(prefix, whole, pn)) bad = 1;
    }
    pn += xl_detok_flush(m, &d, prefix + pn, 4096);
    if (pn != wn || memcmp(prefix, whole, wn)) bad = 1;
    /* flushing mid-stream then continuing equals decoding the two halves apart */
    if (bad) fprintf(stderr, "streaming differs at trial %d\n", trial);
  }
  CHECK(!bad);
  /* latency: a word comes out with its own push; a bracket waits for the next token */
  xl_detok d;
  xl_detok_init(&d);
  char buf[4096];
  int32_t hello = -1, paren = -1, world = -1;
  for (int i = 0; i < N_WT; i++) {
    if (!strcmp(WT_SYMS[i], "Hello")) hello = i;
    if (!strcmp(WT_SYMS[i], "(")) paren = i;
    if (!strcmp(WT_SYMS[i], "world")) world = i;
  }
  size_t w = xl_detok_push(m, &d, hello, buf, sizeof buf);
  CHECK(w == 5 && !memcmp(buf, "Hello", 5));
  CHECK(xl_detok_push(m, &d, paren, buf, sizeof buf) == 0);
  w = xl_detok_push(m, &d, world, buf, sizeof buf);
  CHECK(w == 7 && !memcmp(buf, " (world", 7));
  xl_model_free(m);
}

/* Any bytes (invalid UTF-8, NULs, control characters, the pipeline's own placeholder words)
 * encode without error and decode to valid UTF-8 (under the sanitizers: no overflow). */
static void test_transfo_xl_any_input(void) {
  xl_error err;
  xl_model *m = make("tx_fuzz", "transfo_xl", NULL, WT_SYMS, N_WT, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  static const char *const pieces[] = {"DOTMULTI", "DOTDOTMULTI", "THISISPROTECTED000", "<unk>",
                                       "<UNK>", "...", "..", "@-@", " @,@ ", "1,000", "3.5",
                                       "'s", "n't", "\"", "``", "''", "--", "-", "\xC2\xA0",
                                       "\xE2\x80\x9C", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\n"};
  uint64_t s = 99;
  int bad = 0;
  for (int trial = 0; trial < 2000 && !bad; trial++) {
    char text[512];
    size_t n = 0;
    while (n < 400) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      unsigned r = (unsigned)(s >> 33);
      if (r % 3 == 0) {
        const char *p = pieces[(r / 3) % (sizeof pieces / sizeof *pieces)];
        size_t l = strlen(p);
        memcpy(text + n, p, l);
        n += l;
      } else {
        text[n++] = r % 3 == 1 ? (char)((r >> 8) & 0xFF) : " .,a1'-(\"$%"[(r >> 8) % 12];
      }
      if ((r >> 20) % 17 == 0) break;
    }
    int32_t *ids = NULL;
    size_t k = 0;
    if (xl_tokenize(m, text, n, &ids, &k, &err) != XL_OK) {
      bad = 1;
      break;
    }
    static char out[1 << 16];
    size_t w = stream_decode(m, ids, k, out, sizeof out);
    free(ids);
    for (size_t i = 0; i < w; i++) /* UTF-8 well formed: no stray continuation bytes */
      if (((unsigned char)out[i] & 0xC0) == 0x80 && (i == 0 || (unsigned char)out[i - 1] < 0x80))
        bad = 1;
  }
  CHECK(!bad);
  xl_model_free(m);
}

static void test_byte_table(void) {
  xl_error err;
  static const char *const syms[] = {"104", "105", "32", "195", "169", "10", "<unk>"};
  xl_model *m = make("bt", "byte_table", NULL, syms, 7, &err);
  if (!m) {
    fprintf(stderr, "load: %s\n", err.message);
    CHECK(0);
    return;
  }
  CHECK(!strcmp(enc(m, "hi h\xC3\xA9\n"), "104 105 32 104 195 169 10"));
  const char *e = enc(m, "hi!");
  CHECK(strstr(e, "ERR:") && strstr(e, "byte 33 (0x21)"));
  int32_t *ids;
  size_t n;
  const char *t = "hi h\xC3\xA9";
  CHECK_CODE(xl_tokenize(m, t, strlen(t), &ids, &n, &err), XL_OK);
  static char out[8192];
  stream_decode(m, ids, n, out, sizeof out);
  CHECK(!strcmp(out, t));
  /* the streaming detokeniser holds a character's first byte back until it is complete */
  xl_detok d;
  xl_detok_init(&d);
  CHECK(xl_detok_push(m, &d, 3, out, sizeof out) == 0);
  CHECK(xl_detok_push(m, &d, 4, out, sizeof out) == 2 && !memcmp(out, "\xC3\xA9", 2));
  free(ids);
  xl_model_free(m);
  m = make("bt_drop", "byte_table", "{\"unknown\": \"drop\"}", syms, 7, &err);
  if (!m) {
    CHECK(0);
    return;
  }
  CHECK(!strcmp(enc(m, "h!i?"), "104 105"));
  CHECK(xl_model_tokenizer(m)->unknown_drop == 1);
  xl_model_free(m);
}

static void test_char_table(void) {
  xl_error err;
  static const char *const syms[] = {"_", "a", "b", "e", "h", "l", "o", "n", "t", "w", "r", "d"};
  xl_model *m = make("ct", "char_table", NULL, syms, 12, &err);
  if (!m) {
    fprintf(stderr, "load: %s\n", err.message);
    CHECK(0);
    return;
  }
  CHECK(!strcmp(enc(m, "Hello World"), "h e l l o _ w o r l d"));
  int32_t *ids;
  size_t n;
  CHECK_CODE(xl_tokenize(m, "Hello World", 11, &ids, &n, &err), XL_OK);
  static char out[8192];
  stream_decode(m, ids, n, out, sizeof out);
  CHECK(!strcmp(out, "hello world"));
  free(ids);
  const char *e = enc(m, "Hello!");
  CHECK(strstr(e, "ERR:") && strstr(e, "'!'"));
  e = enc(m, "h\xC3\xA9");
  CHECK(strstr(e, "U+00E9") != NULL);
  CHECK(strstr(enc(m, "a_b"), "'_'") != NULL); /* "_" is the space symbol, not a character */
  xl_model_free(m);
  m = make("ct_opts", "char_table",
           "{\"unknown\": \"drop\", \"spell_digits\": true, \"lower_case\": false}", syms, 12,
           &err);
  if (!m) {
    fprintf(stderr, "load: %s\n", err.message);
    CHECK(0);
    return;
  }
  if (strcmp(enc(m, "a 12!"), "a _ o n e _ t w o")) fprintf(stderr, "got '%s'\n", enc(m, "a 12!"));
  CHECK(!strcmp(enc(m, "a 12!"), "a _ o n e _ t w o"));
  CHECK(!strcmp(enc(m, "Hello"), "e l l o"));
  xl_model_free(m);
}

static void test_bad_options(void) {
  xl_error err;
  static const char *const syms[] = {"<eos>", "<unk>"};
  CHECK(make("opt1", "transfo_xl", "{\"lower_case\": 1}", syms, 2, &err) == NULL);
  CHECK(strstr(err.message, "lower_case") != NULL);
  CHECK(make("opt2", "char_table", "{\"unknown\": \"ignore\"}", syms, 2, &err) == NULL);
  CHECK(strstr(err.message, "unknown") != NULL);
  CHECK(make("opt3", "transfo_xl", "{\"colour\": 1}", syms, 2, &err) == NULL);
  CHECK(strstr(err.message, "colour") != NULL);
  CHECK(make("opt4", "morse", NULL, syms, 2, &err) == NULL);
  CHECK(strstr(err.message, "xlserve_tokenizer") != NULL);
  CHECK(make("opt5", "byte_table", NULL, syms, 2, &err) == NULL);
  CHECK(strstr(err.message, "byte") != NULL);
}

int main(void) {
  RUN(test_transfo_xl_encode);
  RUN(test_transfo_xl_decode);
  RUN(test_transfo_xl_round_trip);
  RUN(test_transfo_xl_streaming);
  RUN(test_transfo_xl_any_input);
  RUN(test_byte_table);
  RUN(test_char_table);
  RUN(test_bad_options);
  return tl_summary();
}
