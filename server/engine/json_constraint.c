/*
 * json_constraint.c: schema compilation and the byte automaton of structured output (see
 * json_constraint.h). Thread: any (a state belongs to one thread; compiled schemas are
 * immutable).
 */
#include "json_constraint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum {
  TY_NULL = 1, TY_BOOL = 2, TY_INT = 4, TY_NUM = 8, TY_STR = 16, TY_ARR = 32, TY_OBJ = 64,
  TY_ANY = 127
};
#define MAX_OPTIONS 64

struct jc_node {
  unsigned types;
  /* enum / const: each option's compact JSON text */
  int n_lits;
  char **lits;
  size_t *lit_lens;
  /* string */
  long min_len, max_len; /* code points; max -1: none */
  /* array */
  const jc_node *items; /* NULL: any value */
  long min_items, max_items;
  /* object: has_props = only these properties (keys as compact JSON strings, quotes included) */
  int has_props, n_props;
  char **keys;
  size_t *key_lens;
  const jc_node **props;
  uint64_t required;
  struct jc_node *next_alloc;
};

struct jc_schema {
  int refs; /* jobs sharing it (loop thread only) */
  const jc_node *root;
  jc_node *nodes; /* every node allocated, for freeing */
};

static const jc_node any_node = {TY_ANY, 0, NULL, NULL, 0, -1, NULL, 0, -1, 0, 0, NULL, NULL, NULL, 0, NULL};
static const jc_node bool_node = {0, 2, (char *[]){"true", "false"}, (size_t[]){4, 5}, 0, -1, NULL, 0, -1,
                                  0, 0, NULL, NULL, NULL, 0, NULL};
static const jc_node null_node = {0, 1, (char *[]){"null"}, (size_t[]){4}, 0, -1, NULL, 0, -1, 0, 0,
                                  NULL, NULL, NULL, 0, NULL};

/* ---------------------------------------------------------------- compilation */

typedef struct cctx {
  jc_schema *s;
  json_t *root;
  char *err;
  size_t cap;
  int failed;
  int n_nodes; /* $ref expands anew at each use: bounded, so a schema cannot blow up */
} cctx;
#define MAX_NODES 4096

static jc_node *fail(cctx *c, const char *path, const char *fmt, ...) {
  if (c->failed) return NULL;
  c->failed = 1;
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->cap, "schema%s: %s", path, msg);
  return NULL;
}

static jc_node *node_new(cctx *c) {
  c->n_nodes++;
  jc_node *n = xcalloc(1, sizeof *n);
  n->max_len = -1;
  n->max_items = -1;
  n->next_alloc = c->s->nodes;
  c->s->nodes = n;
  return n;
}

static void node_free(jc_node *n) {
  for (int i = 0; i < n->n_lits; i++) free(n->lits[i]);
  free(n->lits);
  free(n->lit_lens);
  for (int i = 0; i < n->n_props; i++) free(n->keys[i]);
  free(n->keys);
  free(n->key_lens);
  free(n->props);
  free(n);
}

static void add_lit(jc_node *n, json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  n->lits = xrealloc(n->lits, sizeof *n->lits * (size_t)(n->n_lits + 1));
  n->lit_lens = xrealloc(n->lit_lens, sizeof *n->lit_lens * (size_t)(n->n_lits + 1));
  n->lits[n->n_lits] = t;
  n->lit_lens[n->n_lits++] = strlen(t);
}

static int get_count(cctx *c, json_t *o, const char *k, const char *path, long *out) {
  json_t *v = json_object_get(o, k);
  if (!v) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
    fail(c, path, "'%s' must be a non-negative integer", k);
    return -1;
  }
  *out = (long)json_integer_value(v);
  return 0;
}

/* the bytes a value of node n can start with */
static void first_bytes(const jc_node *n, uint8_t set[256]) {
  memset(set, 0, 256);
  for (int i = 0; i < n->n_lits; i++) set[(unsigned char)n->lits[i][0]] = 1;
  if (n->types & TY_STR) set['"'] = 1;
  if (n->types & TY_OBJ) set['{'] = 1;
  if (n->types & TY_ARR) set['['] = 1;
  if (n->types & (TY_INT | TY_NUM)) {
    set['-'] = 1;
    for (int d = '0'; d <= '9'; d++) set[d] = 1;
  }
  if (n->types & TY_BOOL) set['t'] = set['f'] = 1;
  if (n->types & TY_NULL) set['n'] = 1;
}

static const jc_node *compile(cctx *c, json_t *sch, const char *path, int depth);

static const jc_node *compile_any_of(cctx *c, json_t *arr, const char *path, const char *kw,
                                     int depth) {
  char sub[256];
  if (!json_is_array(arr) || json_array_size(arr) == 0)
    return fail(c, path, "'%s' must be a non-empty array", kw);
  jc_node *m = node_new(c);
  uint8_t seen[256] = {0}, fb[256];
  for (size_t i = 0; i < json_array_size(arr); i++) {
    snprintf(sub, sizeof sub, "%s.%s[%zu]", path, kw, i);
    const jc_node *b = compile(c, json_array_get(arr, i), sub, depth + 1);
    if (!b) return NULL;
    first_bytes(b, fb);
    for (int k = 0; k < 256; k++)
      if (fb[k] && seen[k])
        return fail(c, sub, "branches of '%s' that can start alike are not supported (each "
                            "branch must begin with a different type, e.g. X or null)", kw);
    for (int k = 0; k < 256; k++) seen[k] |= fb[k];
    /* merge: each branch brings its own types' constraints */
    for (int k = 0; k < b->n_lits; k++) {
      json_error_t je;
      json_t *v = json_loads(b->lits[k], JSON_DECODE_ANY, &je);
      if (m->n_lits >= MAX_OPTIONS) {
        json_decref(v);
        return fail(c, path, "at most %d enum options", MAX_OPTIONS);
      }
      add_lit(m, v);
      json_decref(v);
    }
    m->types |= b->types;
    if (b->types & TY_STR) m->min_len = b->min_len, m->max_len = b->max_len;
    if (b->types & TY_ARR) m->items = b->items, m->min_items = b->min_items, m->max_items = b->max_items;
    if (b->types & TY_OBJ) {
      m->has_props = b->has_props;
      m->n_props = b->n_props;
      m->required = b->required;
      m->props = xmalloc(sizeof *m->props * (size_t)(b->n_props ? b->n_props : 1));
      m->keys = xmalloc(sizeof *m->keys * (size_t)(b->n_props ? b->n_props : 1));
      m->key_lens = xmalloc(sizeof *m->key_lens * (size_t)(b->n_props ? b->n_props : 1));
      for (int k = 0; k < b->n_props; k++) {
        m->props[k] = b->props[k];
        m->keys[k] = xstrdup(b->keys[k]);
        m->key_lens[k] = b->key_lens[k];
      }
    }
  }
  return m;
}

static const char *const annotations[] = {
    "title", "description", "default", "examples", "format", "$schema", "$id", "$comment",
    "additionalProperties", "strict", "name", "$defs", "definitions", "readOnly", "writeOnly",
    "deprecated", "propertyOrdering", NULL};
static const char *const keywords[] = {"type", "properties", "required", "items", "enum", "const",
                                       "minLength", "maxLength", "minItems", "maxItems", "anyOf",
                                       "oneOf", "$ref", NULL};

static int known(const char *k) {
  for (int i = 0; annotations[i]; i++)
    if (!strcmp(k, annotations[i])) return 1;
  for (int i = 0; keywords[i]; i++)
    if (!strcmp(k, keywords[i])) return 1;
  return 0;
}

static const jc_node *compile(cctx *c, json_t *sch, const char *path, int depth) {
  char sub[256];
  if (depth > JC_MAX_DEPTH)
    return fail(c, path, "nests deeper than %d levels (a recursive $ref?)", JC_MAX_DEPTH);
  if (c->n_nodes >= MAX_NODES)
    return fail(c, path, "more than %d schema nodes (after expanding $ref)", MAX_NODES);
  if (json_is_true(sch)) return &any_node;
  if (!json_is_object(sch)) return fail(c, path, "a schema must be an object");
  const char *k;
  json_t *v;
  json_object_foreach(sch, k, v) {
    if (!known(k)) return fail(c, path, "the keyword '%s' is not supported", k);
  }
  json_t *ref = json_object_get(sch, "$ref");
  if (ref) {
    const char *r = json_is_string(ref) ? json_string_value(ref) : "";
    if (r[0] != '#') return fail(c, path, "only local $ref (\"#/...\") are supported");
    json_t *t = c->root;
    char tok[256];
    const char *p = r + 1;
    while (*p == '/' && t) {
      p++;
      size_t n = strcspn(p, "/");
      size_t o = 0;
      for (size_t i = 0; i < n && o + 1 < sizeof tok; i++) { /* ~1 -> /, ~0 -> ~ */
        if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
          tok[o++] = p[i + 1] == '1' ? '/' : '~';
          i++;
        } else {
          tok[o++] = p[i];
        }
      }
      tok[o] = 0;
      t = json_object_get(t, tok);
      p += n;
    }
    if (!t || *p) return fail(c, path, "$ref \"%.100s\" does not resolve", r);
    snprintf(sub, sizeof sub, "%s.$ref", path);
    return compile(c, t, sub, depth + 1);
  }
  if ((v = json_object_get(sch, "anyOf"))) return compile_any_of(c, v, path, "anyOf", depth);
  if ((v = json_object_get(sch, "oneOf"))) return compile_any_of(c, v, path, "oneOf", depth);
  jc_node *n = node_new(c);
  json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
  if (en || cn) {
    if (cn) add_lit(n, cn);
    if (en) {
      if (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > MAX_OPTIONS)
        return fail(c, path, "'enum' must be an array of 1 to %d values", MAX_OPTIONS);
      for (size_t i = 0; i < json_array_size(en); i++) add_lit(n, json_array_get(en, i));
    }
    return n; /* the options are the whole set (a type beside them adds nothing) */
  }
  json_t *ty = json_object_get(sch, "type");
  unsigned types = 0;
  for (size_t i = 0; ty && i < (json_is_array(ty) ? json_array_size(ty) : 1); i++) {
    json_t *t = json_is_array(ty) ? json_array_get(ty, i) : ty;
    const char *s = json_is_string(t) ? json_string_value(t) : "";
    if (!strcmp(s, "null")) types |= TY_NULL;
    else if (!strcmp(s, "boolean")) types |= TY_BOOL;
    else if (!strcmp(s, "integer")) types |= TY_INT;
    else if (!strcmp(s, "number")) types |= TY_NUM;
    else if (!strcmp(s, "string")) types |= TY_STR;
    else if (!strcmp(s, "array")) types |= TY_ARR;
    else if (!strcmp(s, "object")) types |= TY_OBJ;
    else return fail(c, path, "unknown type \"%.40s\"", s);
  }
  if (!ty) {
    if (json_object_get(sch, "properties")) types = TY_OBJ;
    else if (json_object_get(sch, "items")) types = TY_ARR;
    else types = TY_ANY;
  }
  n->types = types;
  if (get_count(c, sch, "minLength", path, &n->min_len) || get_count(c, sch, "maxLength", path, &n->max_len) ||
      get_count(c, sch, "minItems", path, &n->min_items) ||
      get_count(c, sch, "maxItems", path, &n->max_items))
    return NULL;
  if (n->max_len >= 0 && n->min_len > n->max_len) return fail(c, path, "minLength > maxLength");
  if (n->max_items >= 0 && n->min_items > n->max_items) return fail(c, path, "minItems > maxItems");
  if ((v = json_object_get(sch, "items"))) {
    if (json_is_array(v)) return fail(c, path, "tuple 'items' (an array) is not supported");
    snprintf(sub, sizeof sub, "%s.items", path);
    if (!(n->items = compile(c, v, sub, depth + 1))) return NULL;
  }
  json_t *props = json_object_get(sch, "properties");
  if (props) {
    if (!json_is_object(props)) return fail(c, path, "'properties' must be an object");
    size_t np = json_object_size(props);
    if (np > MAX_OPTIONS) return fail(c, path, "at most %d properties per object", MAX_OPTIONS);
    n->has_props = np > 0;
    n->props = xmalloc(sizeof *n->props * (np ? np : 1));
    n->keys = xmalloc(sizeof *n->keys * (np ? np : 1));
    n->key_lens = xmalloc(sizeof *n->key_lens * (np ? np : 1));
    json_object_foreach(props, k, v) {
      snprintf(sub, sizeof sub, "%s.properties.%.100s", path, k);
      const jc_node *pn = compile(c, v, sub, depth + 1);
      if (!pn) return NULL;
      json_t *ks = json_string(k);
      n->keys[n->n_props] = json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY);
      json_decref(ks);
      n->key_lens[n->n_props] = strlen(n->keys[n->n_props]);
      n->props[n->n_props++] = pn;
    }
  }
  json_t *req = json_object_get(sch, "required");
  if (req) {
    if (!json_is_array(req)) return fail(c, path, "'required' must be an array of names");
    for (size_t i = 0; i < json_array_size(req); i++) {
      json_t *r = json_array_get(req, i);
      int found = -1;
      for (int p = 0; json_is_string(r) && p < n->n_props; p++) {
        json_t *ks = json_string(json_string_value(r));
        char *kt = json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(ks);
        if (!strcmp(kt, n->keys[p])) found = p;
        free(kt);
      }
      if (found < 0)
        return fail(c, path, "required property \"%.60s\" is not in 'properties'",
                    json_is_string(r) ? json_string_value(r) : "?");
      n->required |= 1ULL << found;
    }
  }
  return n;
}

jc_schema *jc_compile(json_t *schema, int object_only, char *err, size_t cap) {
  jc_schema *s = xcalloc(1, sizeof *s);
  s->refs = 1;
  cctx c = {s, schema, err, cap, 0, 0};
  if (!schema) {
    jc_node *n = node_new(&c);
    n->types = object_only ? TY_OBJ : TY_ANY;
    s->root = n;
    return s;
  }
  s->root = compile(&c, schema, "", 0);
  if (!s->root) {
    jc_schema_free(s);
    return NULL;
  }
  return s;
}

jc_schema *jc_schema_ref(jc_schema *s) {
  if (s) s->refs++;
  return s;
}

void jc_schema_free(jc_schema *s) {
  if (!s || --s->refs > 0) return;
  for (jc_node *n = s->nodes, *nx; n; n = nx) {
    nx = n->next_alloc;
    node_free(n);
  }
  free(s);
}

/* ---------------------------------------------------------------- the automaton */

enum { K_VALUE, K_STR, K_NUM, K_LIT, K_OBJ, K_ARR };
enum { S_NORMAL, S_ESC, S_U1, S_U2, S_U2D, S_U3, S_U4 };
enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { O_FIRST, O_KEY, O_INKEY, O_COLON, O_VALUE, O_AFTER };
enum { A_FIRST, A_AFTER };
#define MAX_NUMBER_BYTES 32
#define MAX_INT_DIGITS 15 /* integers stay exact in a double (JavaScript clients) */

static jc_frame *push(jc_state *st, int kind, const jc_node *n) {
  if (st->depth >= JC_MAX_FRAMES) return NULL;
  jc_frame *f = &st->f[st->depth++];
  memset(f, 0, sizeof *f);
  f->kind = (uint8_t)kind;
  f->node = n;
  f->prop = -1;
  return f;
}

void jc_init(jc_state *st, const jc_schema *s) {
  st->schema = s;
  st->depth = 0;
  st->nest = 0;
  st->done = 0;
  push(st, K_VALUE, s->root);
}

static void copy_state(jc_state *d, const jc_state *s) {
  d->schema = s->schema;
  d->depth = s->depth;
  d->nest = s->nest;
  d->done = s->done;
  memcpy(d->f, s->f, sizeof *s->f * (size_t)s->depth);
}

static void value_done(jc_state *st) {
  if (st->depth == 0) {
    st->done = 1;
    return;
  }
  jc_frame *p = &st->f[st->depth - 1];
  if (p->kind == K_OBJ) p->sub = O_AFTER;
}

static void key_done(jc_state *st, int idx) {
  jc_frame *p = &st->f[st->depth - 1]; /* the object */
  p->prop = (int16_t)idx;
  if (idx >= 0) p->mask |= 1ULL << idx;
  p->sub = O_COLON;
}

static void lit_opts(const jc_frame *f, char ***o, size_t **l, int *n) {
  if (f->is_key) *o = f->node->keys, *l = f->node->key_lens, *n = f->node->n_props;
  else *o = f->node->lits, *l = f->node->lit_lens, *n = f->node->n_lits;
}

/* the literal on top ends here when an option is complete and none extends it */
static void lit_maybe_end(jc_state *st) {
  jc_frame *f = &st->f[st->depth - 1];
  char **o;
  size_t *l;
  int n, complete = -1, longer = 0;
  lit_opts(f, &o, &l, &n);
  for (int i = 0; i < n; i++) {
    if (!(f->mask >> i & 1)) continue;
    if (l[i] == (size_t)f->count) complete = i;
    else longer = 1;
  }
  if (complete < 0 || longer) return;
  int key = f->is_key;
  st->depth--;
  if (key) key_done(st, complete);
  else value_done(st);
}

static int is_ws(unsigned c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_hex(unsigned c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int start_key(jc_state *st) {
  jc_frame *o = &st->f[st->depth - 1];
  const jc_node *n = o->node;
  o->sub = O_INKEY;
  if (n->has_props) {
    uint64_t all = n->n_props == 64 ? ~0ULL : (1ULL << n->n_props) - 1;
    uint64_t alive = all & ~o->mask;
    if (!alive) return -1;
    jc_frame *f = push(st, K_LIT, n);
    if (!f) return -1;
    f->is_key = 1;
    f->mask = alive;
    f->count = 1; /* every key starts with its quote */
    return 0;
  }
  jc_frame *f = push(st, K_STR, n);
  if (!f) return -1;
  f->is_key = 1;
  return 0;
}

static int required_met(const jc_frame *f) { return (f->node->required & ~f->mask) == 0; }

static int props_left(const jc_frame *f) {
  if (!f->node->has_props) return 1;
  uint64_t all = f->node->n_props == 64 ? ~0ULL : (1ULL << f->node->n_props) - 1;
  return (all & ~f->mask) != 0;
}

static void close_container(jc_state *st) {
  st->nest--;
  st->depth--;
  value_done(st);
}

static int step(jc_state *st, unsigned c) {
  int reloop = 0;
  for (;;) {
    if (st->depth == 0) return st->done && reloop && is_ws(c) ? 0 : -1;
    jc_frame *f = &st->f[st->depth - 1];
    const jc_node *n = f->node;
    switch (f->kind) {
      case K_VALUE: {
        uint64_t m = 0;
        for (int i = 0; i < n->n_lits; i++)
          if ((unsigned char)n->lits[i][0] == c) m |= 1ULL << i;
        if (m) {
          f->kind = K_LIT;
          f->mask = m;
          f->count = 1;
          lit_maybe_end(st);
          return 0;
        }
        if (c == '"' && (n->types & TY_STR)) {
          f->kind = K_STR;
          return 0;
        }
        if (c == '{' && (n->types & TY_OBJ) && st->nest < JC_MAX_DEPTH) {
          f->kind = K_OBJ;
          f->sub = O_FIRST;
          st->nest++;
          return 0;
        }
        if (c == '[' && (n->types & TY_ARR) && st->nest < JC_MAX_DEPTH) {
          f->kind = K_ARR;
          f->sub = A_FIRST;
          st->nest++;
          return 0;
        }
        if ((c == '-' || (c >= '0' && c <= '9')) && (n->types & (TY_INT | TY_NUM))) {
          f->kind = K_NUM;
          f->sub = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
          f->count = 1;
          f->lo = f->sub == N_INT;
          return 0;
        }
        if ((c == 't' || c == 'f') && (n->types & TY_BOOL)) {
          f->kind = K_LIT;
          f->node = &bool_node;
          f->mask = c == 't' ? 1 : 2;
          f->count = 1;
          return 0;
        }
        if (c == 'n' && (n->types & TY_NULL)) {
          f->kind = K_LIT;
          f->node = &null_node;
          f->mask = 1;
          f->count = 1;
          return 0;
        }
        return -1;
      }
      case K_STR: {
        if (f->left) {
          if (c < f->lo || c > f->hi) return -1;
          f->left--;
          f->lo = 0x80;
          f->hi = 0xBF;
          return 0;
        }
        switch (f->sub) {
          case S_NORMAL:
            if (c == '"') {
              if (!f->is_key && f->count < n->min_len) return -1;
              int key = f->is_key;
              st->depth--;
              if (key) key_done(st, -1);
              else value_done(st);
              return 0;
            }
            if (c < 0x20) return -1;
            if (!f->is_key && n->max_len >= 0 && f->units + (c >= 0xF0 ? 2 : 1) > n->max_len)
              return -1; /* beyond U+FFFF: two UTF-16 units */
            f->count++;
            f->units += c >= 0xF0 ? 2 : 1;
            if (c == '\\') f->sub = S_ESC;
            else if (c < 0x80) ;
            else if (c >= 0xC2 && c <= 0xDF) f->left = 1, f->lo = 0x80, f->hi = 0xBF;
            else if (c == 0xE0) f->left = 2, f->lo = 0xA0, f->hi = 0xBF;
            else if (c == 0xED) f->left = 2, f->lo = 0x80, f->hi = 0x9F;
            else if (c >= 0xE1 && c <= 0xEF) f->left = 2, f->lo = 0x80, f->hi = 0xBF;
            else if (c == 0xF0) f->left = 3, f->lo = 0x90, f->hi = 0xBF;
            else if (c >= 0xF1 && c <= 0xF3) f->left = 3, f->lo = 0x80, f->hi = 0xBF;
            else if (c == 0xF4) f->left = 3, f->lo = 0x80, f->hi = 0x8F;
            else return -1;
            return 0;
          case S_ESC:
            if (c && strchr("\"\\/bfnrt", (int)c)) f->sub = S_NORMAL;
            else if (c == 'u') f->sub = S_U1;
            else return -1;
            return 0;
          case S_U1:
            if (!is_hex(c)) return -1;
            f->sub = c == 'd' || c == 'D' ? S_U2D : S_U2;
            return 0;
          case S_U2D: /* no surrogates: \uD800-\uDFFF */
            if (!(c >= '0' && c <= '7')) return -1;
            f->sub = S_U3;
            return 0;
          case S_U2:
          case S_U3:
            if (!is_hex(c)) return -1;
            f->sub++;
            if (f->sub == S_U2D) f->sub = S_U3; /* S_U2 -> S_U3 */
            return 0;
          case S_U4:
            if (!is_hex(c)) return -1;
            f->sub = S_NORMAL;
            return 0;
        }
        return -1;
      }
      case K_NUM: {
        int int_only = !(n->types & TY_NUM), digit = c >= '0' && c <= '9', next = -1;
        int room = f->count <= MAX_NUMBER_BYTES - 3; /* an unfinished form can still finish */
        switch (f->sub) {
          case N_SIGN: if (digit) next = c == '0' ? N_ZERO : N_INT; break;
          case N_ZERO:
            if (!int_only && c == '.' && room) next = N_DOT;
            else if (!int_only && (c == 'e' || c == 'E') && room) next = N_E;
            break;
          case N_INT:
            if (digit && f->lo < MAX_INT_DIGITS) next = N_INT;
            else if (!int_only && c == '.' && room) next = N_DOT;
            else if (!int_only && (c == 'e' || c == 'E') && room) next = N_E;
            break;
          case N_DOT: if (digit) next = N_FRAC; break;
          case N_FRAC:
            if (digit) next = N_FRAC;
            else if ((c == 'e' || c == 'E') && room) next = N_E;
            break;
          case N_E:
            if (c == '+' || c == '-') next = N_ESIGN;
            else if (digit) next = N_EXP;
            break;
          case N_ESIGN: if (digit) next = N_EXP; break;
          case N_EXP: if (digit && f->exp_digits < 2) next = N_EXP; break;
        }
        if (next >= 0 && f->count < MAX_NUMBER_BYTES) {
          if (next == N_EXP) f->exp_digits++;
          if (next == N_INT) f->lo++; /* integer-part digits */
          f->sub = (uint8_t)next;
          f->count++;
          return 0;
        }
        if (f->sub == N_ZERO || f->sub == N_INT || f->sub == N_FRAC || f->sub == N_EXP) {
          st->depth--;
          value_done(st);
          reloop = 1;
          continue;
        }
        return -1;
      }
      case K_LIT: {
        char **o;
        size_t *l;
        int no, complete = 0;
        lit_opts(f, &o, &l, &no);
        uint64_t m = 0;
        for (int i = 0; i < no; i++) {
          if (!(f->mask >> i & 1)) continue;
          if (l[i] > (size_t)f->count && (unsigned char)o[i][f->count] == c) m |= 1ULL << i;
          if (l[i] == (size_t)f->count) complete = 1;
        }
        if (m) {
          f->mask = m;
          f->count++;
          lit_maybe_end(st);
          return 0;
        }
        if (complete && !f->is_key) { /* an option that others extended ends here */
          st->depth--;
          value_done(st);
          reloop = 1;
          continue;
        }
        return -1;
      }
      case K_OBJ:
        switch (f->sub) {
          case O_FIRST:
            if (c == '}' && required_met(f)) {
              close_container(st);
              return 0;
            }
            if (c == '"') return start_key(st);
            return -1;
          case O_KEY:
            return c == '"' ? start_key(st) : -1;
          case O_COLON:
            if (c != ':') return -1;
            f->sub = O_VALUE;
            return push(st, K_VALUE, f->prop >= 0 ? n->props[f->prop] : &any_node) ? 0 : -1;
          case O_AFTER:
            if (c == ',' && props_left(f)) {
              f->sub = O_KEY;
              return 0;
            }
            if (c == '}' && required_met(f)) {
              close_container(st);
              return 0;
            }
            return -1;
          default:
            return -1;
        }
      case K_ARR:
        if (f->sub == A_FIRST) {
          if (c == ']' && n->min_items == 0) {
            close_container(st);
            return 0;
          }
          if (n->max_items == 0) return -1;
          f->count = 1;
          f->sub = A_AFTER;
          if (!push(st, K_VALUE, n->items ? n->items : &any_node)) return -1;
          continue; /* c starts the first item */
        }
        if (c == ',' && (n->max_items < 0 || f->count < n->max_items)) {
          f->count++;
          return push(st, K_VALUE, n->items ? n->items : &any_node) ? 0 : -1;
        }
        if (c == ']' && f->count >= n->min_items) {
          close_container(st);
          return 0;
        }
        return -1;
    }
    return -1;
  }
}

int jc_step(jc_state *st, unsigned char c) {
  jc_state t;
  copy_state(&t, st);
  if (step(&t, c)) return -1;
  copy_state(st, &t);
  return 0;
}

int jc_accepts(const jc_state *st, const unsigned char *bytes, size_t n) {
  if (n == 0) return 0;
  jc_state t;
  copy_state(&t, st);
  for (size_t i = 0; i < n; i++)
    if (step(&t, bytes[i])) return 0;
  return 1;
}

int jc_allowed_bytes(const jc_state *st, uint8_t allowed[256]) {
  jc_state t;
  int n = 0;
  for (int c = 0; c < 256; c++) {
    copy_state(&t, st);
    allowed[c] = step(&t, (unsigned)c) == 0;
    n += allowed[c];
  }
  return n;
}
