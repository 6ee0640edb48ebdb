/*
 * json_constraint.c: schema compilation and the byte automaton of structured output (see
 * json_constraint.h; string patterns and formats in jc_regex.c). Thread: any (a state belongs to
 * one thread; compiled schemas are immutable).
 */
#include "json_constraint.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jc_regex.h"
#include "util.h"

enum {
  TY_NULL = 1, TY_BOOL = 2, TY_INT = 4, TY_NUM = 8, TY_STR = 16, TY_ARR = 32, TY_OBJ = 64,
  TY_ANY = 127
};
#define MAX_OPTIONS 64
#define MAX_INT_DIGITS 15   /* integers stay exact in a double (JavaScript clients) */
#define BOUNDED_FRAC 6      /* a bounded number: at most 6 fraction digits ... */
#define BOUNDED_INT_DIGITS 12 /* ... and 12 integer digits, no exponent */

struct jc_node {
  unsigned types;
  /* enum / const: each option's compact JSON text */
  int n_lits;
  char **lits;
  size_t *lit_lens;
  int *lit_branch; /* a discriminator's options: the branch each selects */
  /* string */
  long min_len, max_len; /* code points / UTF-16 units; max -1: none */
  jc_re *re;             /* pattern and/or format, else NULL */
  /* number (bounded: integers and decimals within [lo, hi] in units of 10^-frac) */
  int bounded, frac, int_digits;
  int64_t lo, hi, mult; /* mult 0: none */
  /* array */
  const jc_node *items; /* NULL: any value */
  int items_false, n_prefix;
  const jc_node **prefix;
  long min_items, max_items;
  /* object: listed keys (as compact JSON strings, quotes included) and free keys */
  int has_props, n_props;
  char **keys;
  size_t *key_lens;
  const jc_node **props;
  uint64_t required;
  int free;             /* keys not listed may come (values: addl, or any) */
  const jc_node *addl;  /* NULL: any value */
  const jc_node *names; /* the free keys' string schema (NULL: any string) */
  long min_props, max_props;
  /* anyOf / oneOf: branches tried in order; disc: a discriminated union of objects */
  int n_branches, disc, keyunion; /* keyunion: objects told apart by their first key */
  const jc_node **branches;
  int *disc_idx; /* disc: the discriminator's index among each branch's keys */
  /* $ref: the node compiled for the target (a recursive schema refers back to its alias) */
  const struct jc_node *alias;
  int pending; /* alias whose target is still being compiled */
  /* containers a value of this node must still open to complete, from here (0: a scalar will
   * do); h_obj/h_arr: when it starts as an object / array (the braces included) */
  int height, h_obj, h_arr;
  struct jc_node *next_alloc;
};

struct jc_schema {
  int refs; /* jobs sharing it (loop thread only) */
  const jc_node *root;
  jc_node *nodes; /* every node allocated, for freeing */
};

/* a $ref's target (itself while that is still being compiled) */
static const jc_node *D(const jc_node *n) {
  for (int i = 0; n && n->alias && i < 64; i++) n = n->alias;
  return n;
}

#define NODE_DEFAULTS .max_len = -1, .max_items = -1, .max_props = -1
static const jc_node any_node = {.types = TY_ANY, .free = 1, NODE_DEFAULTS};
static const jc_node key_node = {.types = TY_STR, NODE_DEFAULTS};
static const jc_node bool_node = {.n_lits = 2, .lits = (char *[]){"true", "false"},
                                  .lit_lens = (size_t[]){4, 5}, NODE_DEFAULTS};
static const jc_node null_node = {.n_lits = 1, .lits = (char *[]){"null"}, .lit_lens = (size_t[]){4},
                                  NODE_DEFAULTS};

/* ---------------------------------------------------------------- compilation */

typedef struct cctx {
  jc_schema *s;
  json_t *root;
  char *err;
  size_t cap;
  char *epath;
  size_t epath_cap;
  int failed;
  int n_nodes; /* nodes compiled: bounded, so a schema cannot blow up */
  int re_budget; /* automaton states the patterns and formats may still build */
  json_t **ref_t; /* $ref targets compiled (or being compiled) and their alias nodes */
  jc_node **ref_n;
  int n_refs;
} cctx;
#define MAX_NODES 4096
#define RE_BUDGET 8192 /* per schema: a compilation stays within tens of milliseconds */

static jc_node *fail(cctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static jc_node *fail(cctx *c, const char *path, const char *fmt, ...) {
  if (c->failed) return NULL;
  c->failed = 1;
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->cap, "schema%s: %s", path, msg);
  if (c->epath) snprintf(c->epath, c->epath_cap, "%s", path);
  return NULL;
}

static jc_node *node_new(cctx *c) {
  c->n_nodes++;
  jc_node *n = xcalloc(1, sizeof *n);
  n->max_len = -1;
  n->max_items = -1;
  n->max_props = -1;
  n->next_alloc = c->s->nodes;
  c->s->nodes = n;
  return n;
}

static void node_free(jc_node *n) {
  for (int i = 0; i < n->n_lits; i++) free(n->lits[i]);
  free(n->lits);
  free(n->lit_lens);
  free(n->lit_branch);
  for (int i = 0; i < n->n_props; i++) free(n->keys[i]);
  free(n->keys);
  free(n->key_lens);
  free(n->props);
  free(n->prefix);
  free(n->branches);
  free(n->disc_idx);
  jc_re_free(n->re);
  free(n);
}

static void add_lit(jc_node *n, json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  n->lits = xrealloc(n->lits, sizeof *n->lits * (size_t)(n->n_lits + 1));
  n->lit_lens = xrealloc(n->lit_lens, sizeof *n->lit_lens * (size_t)(n->n_lits + 1));
  n->lits[n->n_lits] = t;
  n->lit_lens[n->n_lits++] = strlen(t);
}

static void add_key(jc_node *n, const char *k, const jc_node *value) {
  n->keys = xrealloc(n->keys, sizeof *n->keys * (size_t)(n->n_props + 1));
  n->key_lens = xrealloc(n->key_lens, sizeof *n->key_lens * (size_t)(n->n_props + 1));
  n->props = xrealloc(n->props, sizeof *n->props * (size_t)(n->n_props + 1));
  json_t *ks = json_string(k);
  n->keys[n->n_props] = json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(ks);
  n->key_lens[n->n_props] = strlen(n->keys[n->n_props]);
  n->props[n->n_props++] = value;
  n->has_props = 1;
}

static int key_index(const jc_node *n, const char *k) {
  json_t *ks = json_string(k);
  char *kt = json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(ks);
  int found = -1;
  for (int p = 0; kt && p < n->n_props && found < 0; p++)
    if (!strcmp(kt, n->keys[p])) found = p;
  free(kt);
  return found;
}

static int get_count(cctx *c, json_t *o, const char *k, const char *path, long *out) {
  json_t *v = json_object_get(o, k);
  if (!v) return 0;
  double d = json_is_number(v) ? json_number_value(v) : -1;
  if (d < 0 || d > 1000000000 || d != floor(d)) {
    char sub[300];
    if (snprintf(sub, sizeof sub, "%s.%s", path, k) >= (int)sizeof sub) /* a long path is cut */
      sub[sizeof sub - 1] = '\0';
    fail(c, sub, "'%s' must be a non-negative integer", k);
    return -1;
  }
  *out = (long)d;
  return 0;
}

/* the bytes a value of node n can start with (a superset) */
static void first_bytes_d(const jc_node *n, uint8_t set[256], int depth) {
  n = D(n);
  if (n->pending || depth > 64) { /* not known yet: anything */
    memset(set, 1, 256);
    return;
  }
  memset(set, 0, 256);
  for (int i = 0; i < n->n_lits; i++) set[(unsigned char)n->lits[i][0]] = 1;
  for (int i = 0; i < n->n_branches; i++) {
    uint8_t b[256];
    first_bytes_d(n->branches[i], b, depth + 1);
    for (int k = 0; k < 256; k++) set[k] |= b[k];
  }
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

static void first_bytes(const jc_node *n, uint8_t set[256]) { first_bytes_d(n, set, 0); }

static int lit_only(const jc_node *n) {
  n = D(n);
  return n->n_lits > 0 && !n->types && !n->n_branches && !n->pending;
}
static int plain_object(const jc_node *n) {
  n = D(n);
  return n->types == TY_OBJ && !n->n_lits && !n->n_branches && !n->disc && !n->keyunion && !n->pending;
}

/* the JSON types node n's values can have */
static unsigned value_types_d(const jc_node *n, int depth) {
  n = D(n);
  if (n->pending || depth > 64) return TY_ANY | TY_NUM;
  unsigned t = n->types;
  if (t & TY_INT) t |= TY_NUM;
  for (int i = 0; i < n->n_lits; i++) {
    char ch = n->lits[i][0];
    t |= ch == '"' ? TY_STR : ch == '{' ? TY_OBJ : ch == '[' ? TY_ARR : ch == 'n' ? TY_NULL
       : ch == 't' || ch == 'f' ? TY_BOOL : TY_NUM;
  }
  for (int i = 0; i < n->n_branches; i++) t |= value_types_d(n->branches[i], depth + 1);
  if (n->disc) t |= TY_OBJ;
  return t;
}
static unsigned value_types(const jc_node *n) { return value_types_d(n, 0); }

static int lits_disjoint(const jc_node *a, const jc_node *b) {
  for (int i = 0; i < a->n_lits; i++)
    for (int j = 0; j < b->n_lits; j++)
      if (!strcmp(a->lits[i], b->lits[j])) return 0;
  return 1;
}

/* 1 when no value can validate against both (proved by the simple rules below) */
static int excludes(const jc_node *a, const jc_node *b) {
  if (!(value_types(a) & value_types(b))) return 1;
  if (lit_only(a) && lit_only(b)) return lits_disjoint(a, b);
  if (plain_object(a) && plain_object(b)) {
    for (int pass = 0; pass < 2; pass++) {
      const jc_node *x = pass ? b : a, *y = pass ? a : b;
      for (int i = 0; i < x->n_props; i++) {
        if (!(x->required >> i & 1)) continue;
        int j = -1;
        for (int k = 0; k < y->n_props && j < 0; k++)
          if (!strcmp(x->keys[i], y->keys[k])) j = k;
        if (j < 0 && !y->free) return 1; /* x requires a key y does not allow */
        if (j >= 0 && (y->required >> j & 1) && lit_only(x->props[i]) && lit_only(y->props[j]) &&
            lits_disjoint(D(x->props[i]), D(y->props[j])))
          return 1; /* a discriminator */
      }
    }
  }
  return 0;
}

/* objects that all require one property whose const/enum values differ between them: a node
 * that writes that property first, then continues as the branch its value selects */
static const jc_node *make_disc(cctx *c, const jc_node **br, int n) {
  for (int i = 0; i < n; i++)
    if (!plain_object(br[i])) return NULL;
  for (int k = 0; k < br[0]->n_props; k++) {
    if (!(br[0]->required >> k & 1)) continue;
    int *idx = xmalloc(sizeof *idx * (size_t)n), ok = 1, total = 0;
    for (int b = 0; b < n && ok; b++) {
      idx[b] = -1;
      for (int j = 0; j < br[b]->n_props && idx[b] < 0; j++)
        if (!strcmp(br[b]->keys[j], br[0]->keys[k])) idx[b] = j;
      ok = idx[b] >= 0 && (br[b]->required >> idx[b] & 1) && lit_only(br[b]->props[idx[b]]);
      for (int a = 0; a < b && ok; a++) ok = lits_disjoint(D(br[a]->props[idx[a]]), D(br[b]->props[idx[b]]));
      if (ok) total += D(br[b]->props[idx[b]])->n_lits;
    }
    if (!ok || total > MAX_OPTIONS) {
      free(idx);
      continue;
    }
    jc_node *lit = node_new(c);
    lit->lit_branch = xmalloc(sizeof *lit->lit_branch * (size_t)total);
    for (int b = 0; b < n; b++) {
      const jc_node *v = D(br[b]->props[idx[b]]);
      for (int o = 0; o < v->n_lits; o++) {
        lit->lit_branch[lit->n_lits] = b;
        lit->lits = xrealloc(lit->lits, sizeof *lit->lits * (size_t)(lit->n_lits + 1));
        lit->lit_lens = xrealloc(lit->lit_lens, sizeof *lit->lit_lens * (size_t)(lit->n_lits + 1));
        lit->lits[lit->n_lits] = xstrdup(v->lits[o]);
        lit->lit_lens[lit->n_lits++] = v->lit_lens[o];
      }
    }
    jc_node *d = node_new(c);
    d->types = TY_OBJ;
    d->disc = 1;
    d->has_props = 1;
    d->n_props = 1;
    d->keys = xmalloc(sizeof *d->keys);
    d->key_lens = xmalloc(sizeof *d->key_lens);
    d->props = xmalloc(sizeof *d->props);
    d->keys[0] = xstrdup(br[0]->keys[k]);
    d->key_lens[0] = br[0]->key_lens[k];
    d->props[0] = lit;
    d->required = 1;
    d->n_branches = n;
    d->branches = xmalloc(sizeof *d->branches * (size_t)n);
    memcpy(d->branches, br, sizeof *br * (size_t)n);
    d->disc_idx = idx;
    return d;
  }
  return NULL;
}

static const jc_node *make_keyunion(cctx *c, const jc_node **obj, int n) {
  jc_node *u = node_new(c);
  u->types = TY_OBJ;
  u->keyunion = 1;
  u->min_props = 1;
  for (int b = 0; b < n; b++) {
    if (!obj[b]->required && obj[b]->min_props == 0) u->min_props = 0; /* {} is one of them */
    for (int k = 0; k < obj[b]->n_props; k++) {
      int have = 0;
      for (int j = 0; j < u->n_props && !have; j++) have = !strcmp(u->keys[j], obj[b]->keys[k]);
      if (have) continue;
      if (u->n_props == 64) return NULL;
      u->keys = xrealloc(u->keys, sizeof *u->keys * (size_t)(u->n_props + 1));
      u->key_lens = xrealloc(u->key_lens, sizeof *u->key_lens * (size_t)(u->n_props + 1));
      u->props = xrealloc(u->props, sizeof *u->props * (size_t)(u->n_props + 1));
      u->keys[u->n_props] = xstrdup(obj[b]->keys[k]);
      u->key_lens[u->n_props] = obj[b]->key_lens[k];
      u->props[u->n_props++] = obj[b]->props[k];
    }
  }
  u->has_props = u->n_props > 0;
  u->n_branches = n;
  u->branches = xmalloc(sizeof *u->branches * (size_t)n);
  memcpy(u->branches, obj, sizeof *obj * (size_t)n);
  return u;
}

static const jc_node *compile(cctx *c, json_t *sch, const char *path, int depth);

static const jc_node *compile_any_of(cctx *c, json_t *arr, const char *path, const char *kw,
                                     int depth) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s.%s", path, kw);
  if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > MAX_OPTIONS)
    return fail(c, sub, "'%s' must be an array of 1 to %d schemas", kw, MAX_OPTIONS);
  int n = (int)json_array_size(arr);
  const jc_node **br = xmalloc(sizeof *br * (size_t)n);
  for (int i = 0; i < n; i++) {
    snprintf(sub, sizeof sub, "%s.%s[%d]", path, kw, i);
    if (!(br[i] = compile(c, json_array_get(arr, i), sub, depth + 1))) {
      free(br);
      return NULL;
    }
    br[i] = D(br[i]); /* a resolved $ref: its target (a pending one stays opaque) */
  }
  if (n == 1) {
    const jc_node *one = br[0];
    free(br);
    return one;
  }
  int overlap = 0;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      uint8_t a[256], b[256];
      first_bytes(br[i], a);
      first_bytes(br[j], b);
      int o = 0;
      for (int k = 0; k < 256; k++) o |= a[k] & b[k];
      if (!o) continue;
      overlap = 1;
      if (!strcmp(kw, "oneOf") && !excludes(br[i], br[j]) && !make_disc(c, br, n)) {
        free(br);
        snprintf(sub, sizeof sub, "%s.%s[%d]", path, kw, j);
        return fail(c, sub, "branches %d and %d of 'oneOf' can match the same value (supported: "
                            "branches of different types, or objects told apart by a required "
                            "property with different const/enum values, or by a required property "
                            "the other does not allow)", i, j);
      }
    }
  if (overlap) { /* objects with a discriminator: the exact union */
    const jc_node *d = make_disc(c, br, n);
    if (d) {
      free(br);
      return d;
    }
    /* objects without free keys: one node that takes the first key of any of them, then
     * continues as the first branch listing that key (the others: the first match wins) */
    int first = -1, k = 0;
    for (int i = 0; i < n; i++)
      if (plain_object(br[i]) && !br[i]->free) k++, first = first < 0 ? i : first;
    const jc_node **obj = xmalloc(sizeof *obj * (size_t)n);
    int no = 0;
    for (int i = 0; i < n && k >= 2; i++)
      if (plain_object(br[i]) && !br[i]->free) obj[no++] = br[i];
    const jc_node *u = k >= 2 ? make_keyunion(c, obj, no) : NULL;
    free(obj);
    if (u) {
      int o = 0;
      for (int i = 0; i < n; i++) {
        if (i == first) br[o++] = u;
        else if (!(plain_object(br[i]) && !br[i]->free)) br[o++] = br[i];
      }
      n = o;
    }
  }
  if (n == 1) {
    const jc_node *one = br[0];
    free(br);
    return one;
  }
  jc_node *m = node_new(c);
  m->n_branches = n;
  m->branches = br;
  return m;
}

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor",
    "strict", "name", "$defs", "definitions", "readOnly", "writeOnly", "deprecated",
    "propertyOrdering", "discriminator", "contentEncoding", "contentMediaType", NULL};
static const char *const keywords[] = {
    "type", "properties", "required", "items", "prefixItems", "enum", "const", "minLength",
    "maxLength", "pattern", "format", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "additionalProperties", "propertyNames", "minProperties", "maxProperties", NULL};

static int is_annotation(const char *k) {
  for (int i = 0; annotations[i]; i++)
    if (!strcmp(k, annotations[i])) return 1;
  return 0;
}

static int known(const char *k) {
  if (is_annotation(k)) return 1;
  for (int i = 0; keywords[i]; i++)
    if (!strcmp(k, keywords[i])) return 1;
  return 0;
}

/* ---- numbers ---- */

static const int64_t P10[19] = {1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL,
                                100000000LL, 1000000000LL, 10000000000LL, 100000000000LL,
                                1000000000000LL, 10000000000000LL, 100000000000000LL,
                                1000000000000000LL, 10000000000000000LL, 100000000000000000LL,
                                1000000000000000000LL};

/* the value a scaled integer stands for, as a JSON reader (strtod) sees its decimal text */
static double scaled_value(int64_t x, int frac) {
  char t[64];
  uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
  if (frac)
    snprintf(t, sizeof t, "%s%llu.%0*llu", x < 0 ? "-" : "", (unsigned long long)(m / (uint64_t)P10[frac]),
             frac, (unsigned long long)(m % (uint64_t)P10[frac]));
  else
    snprintf(t, sizeof t, "%s%llu", x < 0 ? "-" : "", (unsigned long long)m);
  return strtod(t, NULL);
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* some multiple of m (0: any value) in [a, b] */
static int has_multiple(int64_t a, int64_t b, int64_t m) {
  if (a > b) return 0;
  if (!m) return 1;
  return floor_div(b, m) * m >= a;
}

/* the smallest x in [-r, r] with x/10^frac >= bound (> when strict); r + 1 when none */
static int64_t lower_limit(double bound, int strict, int frac, int64_t r) {
  long double g = ceill((long double)bound * (long double)P10[frac]);
  int64_t x = g > (long double)r ? r + 1 : g < (long double)-r ? -r : (int64_t)g;
#define SAT(v) (strict ? scaled_value(v, frac) > bound : scaled_value(v, frac) >= bound)
  if (x > r) return SAT(r) ? r : r + 1;
  for (int i = 0; i < 8 && x > -r && SAT(x - 1); i++) x--;
  for (int i = 0; i < 8 && x <= r && !SAT(x); i++) x++;
  return x <= r && SAT(x) ? x : r + 1;
#undef SAT
}

static int64_t upper_limit(double bound, int strict, int frac, int64_t r) {
  long double g = floorl((long double)bound * (long double)P10[frac]);
  int64_t x = g < (long double)-r ? -r - 1 : g > (long double)r ? r : (int64_t)g;
#define SAT(v) (strict ? scaled_value(v, frac) < bound : scaled_value(v, frac) <= bound)
  if (x < -r) return SAT(-r) ? -r : -r - 1;
  for (int i = 0; i < 8 && x < r && SAT(x + 1); i++) x++;
  for (int i = 0; i < 8 && x >= -r && !SAT(x); i++) x--;
  return x >= -r && SAT(x) ? x : -r - 1;
#undef SAT
}

static int compile_number(cctx *c, json_t *sch, jc_node *n, const char *path) {
  char sub[300];
  json_t *b[4] = {json_object_get(sch, "minimum"), json_object_get(sch, "exclusiveMinimum"),
                  json_object_get(sch, "maximum"), json_object_get(sch, "exclusiveMaximum")};
  static const char *const bn[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
  json_t *mo = json_object_get(sch, "multipleOf");
  json_t *fmt = json_object_get(sch, "format");
  /* ajv-formats' int32 and int64 require whole numbers (int32: in its range) */
  int int32 = json_is_string(fmt) && !strcmp(json_string_value(fmt), "int32");
  int int64 = json_is_string(fmt) && !strcmp(json_string_value(fmt), "int64");
  int any = int32 || int64 || mo != NULL;
  for (int i = 0; i < 4; i++) {
    if (!b[i]) continue;
    any = 1;
    if (!json_is_number(b[i])) {
      snprintf(sub, sizeof sub, "%s.%s", path, bn[i]);
      fail(c, sub, "'%s' must be a number (draft-04 boolean exclusive bounds are not supported)", bn[i]);
      return -1;
    }
  }
  if (!any || !(n->types & (TY_INT | TY_NUM))) return 0;
  if ((n->types & TY_INT) && (n->types & TY_NUM)) n->types &= ~(unsigned)TY_INT; /* number covers both */
  int int_only = !(n->types & TY_NUM);
  if (mo) {
    snprintf(sub, sizeof sub, "%s.multipleOf", path);
    double m = json_is_number(mo) ? json_number_value(mo) : -1;
    if (!(m > 0)) {
      fail(c, sub, "'multipleOf' must be a number above 0");
      return -1;
    }
    if (m != floor(m) || m > 1e15) {
      fail(c, sub, "'multipleOf' is supported only as a whole number (%g is not)", m);
      return -1;
    }
    n->mult = (int64_t)m;
    int_only = 1; /* a whole multipleOf: whole numbers */
  }
  if (int32 || int64) int_only = 1;
  n->bounded = 1;
  n->frac = int_only ? 0 : BOUNDED_FRAC;
  n->int_digits = int_only ? MAX_INT_DIGITS : BOUNDED_INT_DIGITS;
  int64_t r = P10[n->int_digits + n->frac] - 1;
  n->lo = -r;
  n->hi = r;
  if (int32) n->lo = -2147483648LL, n->hi = 2147483647LL;
  for (int i = 0; i < 4; i++) {
    if (!b[i]) continue;
    double v = json_number_value(b[i]);
    int64_t x = i < 2 ? lower_limit(v, i == 1, n->frac, r) : upper_limit(v, i == 3, n->frac, r);
    if (i < 2 && x > n->lo) n->lo = x;
    if (i >= 2 && x < n->hi) n->hi = x;
  }
  if (!has_multiple(n->lo, n->hi, n->mult)) {
    fail(c, path, "no %s within the bounds (minimum/maximum/multipleOf; at most %d integer digits%s)",
         int_only ? "integer" : "number", n->int_digits, int_only ? "" : ", 6 decimals");
    return -1;
  }
  return 0;
}

/* ---- strings ---- */

static int compile_string(cctx *c, json_t *sch, jc_node *n, const char *path) {
  char sub[300], e[300];
  json_t *pat = json_object_get(sch, "pattern"), *fmt = json_object_get(sch, "format");
  jc_re *rp = NULL, *rf = NULL;
  if (pat) {
    snprintf(sub, sizeof sub, "%s.pattern", path);
    if (!json_is_string(pat)) {
      fail(c, sub, "'pattern' must be a string");
      return -1;
    }
    if (!(rp = jc_re_compile(json_string_value(pat), c->re_budget, e, sizeof e))) {
      fail(c, sub, "pattern /%.80s/: %s", json_string_value(pat), e);
      return -1;
    }
  }
  if (fmt) {
    snprintf(sub, sizeof sub, "%s.format", path);
    if (!json_is_string(fmt)) {
      jc_re_free(rp);
      fail(c, sub, "'format' must be a string");
      return -1;
    }
    const char *f = json_string_value(fmt);
    int numeric = !strcmp(f, "int32") || !strcmp(f, "int64") || !strcmp(f, "float") || !strcmp(f, "double");
    if (numeric && !(n->types & TY_STR)) {
      /* compile_number applies int32; int64/float/double hold for every generated number */
    } else if (!(n->types & TY_STR)) {
      /* a string format on a schema without strings constrains nothing */
    } else if (!(rf = jc_re_format(f, c->re_budget - (rp ? rp->built : 0), e, sizeof e))) {
      jc_re_free(rp);
      fail(c, sub, "%s", e);
      return -1;
    }
  }
  if (rp && rf) {
    c->re_budget -= rp->built + rf->built;
    n->re = jc_re_intersect(rp, rf, c->re_budget, e, sizeof e);
    jc_re_free(rp);
    jc_re_free(rf);
    if (!n->re) {
      fail(c, path, "%s", e);
      return -1;
    }
  } else {
    n->re = rp ? rp : rf;
  }
  if (n->re) c->re_budget -= n->re->built;
  if (n->re && (n->types & TY_STR) && !jc_re_len_ok(n->re, 0, n->min_len, n->max_len)) {
    fail(c, path, "no string of the pattern/format has a length within minLength/maxLength");
    return -1;
  }
  return 0;
}

/* ---- objects ---- */

static int compile_object(cctx *c, json_t *sch, jc_node *n, const char *path, int depth) {
  char sub[300];
  const char *k;
  json_t *v;
  json_t *props = json_object_get(sch, "properties");
  if (props) {
    snprintf(sub, sizeof sub, "%s.properties", path);
    if (!json_is_object(props)) return fail(c, sub, "'properties' must be an object"), -1;
    if (json_object_size(props) > MAX_OPTIONS)
      return fail(c, sub, "at most %d properties per object", MAX_OPTIONS), -1;
    json_object_foreach(props, k, v) {
      snprintf(sub, sizeof sub, "%s.properties.%.100s", path, k);
      const jc_node *pn = compile(c, v, sub, depth + 1);
      if (!pn) return -1;
      add_key(n, k, pn);
    }
  }
  json_t *ap = json_object_get(sch, "additionalProperties");
  snprintf(sub, sizeof sub, "%s.additionalProperties", path);
  if (ap && !json_is_boolean(ap) && !json_is_object(ap))
    return fail(c, sub, "'additionalProperties' must be a boolean or a schema"), -1;
  if (json_is_object(ap)) {
    n->free = 1;
    if (!(n->addl = compile(c, ap, sub, depth + 1))) return -1;
  } else {
    /* listed properties only (false, or true/absent beside properties: as OpenAI's strict mode);
     * without properties, any keys */
    n->free = !n->has_props && !json_is_false(ap);
  }
  json_t *pnames = json_object_get(sch, "propertyNames");
  if (pnames) {
    snprintf(sub, sizeof sub, "%s.propertyNames", path);
    if (!json_is_object(pnames)) return fail(c, sub, "'propertyNames' must be a schema"), -1;
    const char *kk;
    json_t *kv;
    json_object_foreach(pnames, kk, kv) {
      if (is_annotation(kk) || !strcmp(kk, "enum") || !strcmp(kk, "const") || !strcmp(kk, "minLength") ||
          !strcmp(kk, "maxLength") || (!strcmp(kk, "type") && json_is_string(kv) && !strcmp(json_string_value(kv), "string")))
        continue;
      char s2[340];
      snprintf(s2, sizeof s2, "%s.%s", sub, kk);
      return fail(c, s2, "'propertyNames' supports type string, enum, const, minLength and "
                         "maxLength (not '%s')", kk), -1;
    }
    json_t *en = json_object_get(pnames, "enum"), *cn = json_object_get(pnames, "const");
    if (en || cn) { /* a closed set of names: each becomes a listed key */
      json_t *names = json_array();
      if (cn) json_array_append(names, cn);
      for (size_t i = 0; json_is_array(en) && i < json_array_size(en); i++) {
        json_t *x = json_array_get(en, i);
        if (!cn || json_equal(x, cn)) json_array_append(names, x);
      }
      if ((en && !json_is_array(en)) || json_array_size(names) == 0 ||
          json_array_size(names) > MAX_OPTIONS) {
        json_decref(names);
        return fail(c, sub, "'propertyNames' enum must list 1 to %d names", MAX_OPTIONS), -1;
      }
      for (size_t i = 0; i < json_array_size(names); i++) {
        json_t *x = json_array_get(names, i);
        if (!json_is_string(x)) {
          json_decref(names);
          return fail(c, sub, "'propertyNames' enum holds a value that is not a string"), -1;
        }
        if (key_index(n, json_string_value(x)) < 0 && n->free)
          add_key(n, json_string_value(x), n->addl ? n->addl : &any_node);
      }
      for (int p = 0; p < n->n_props; p++) { /* listed keys outside the names cannot be written */
        int in = 0;
        for (size_t i = 0; i < json_array_size(names); i++) {
          json_t *ks = json_string(json_string_value(json_array_get(names, i)));
          char *kt = json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY);
          json_decref(ks);
          in |= !strcmp(kt, n->keys[p]);
          free(kt);
        }
        if (!in) {
          json_decref(names);
          return fail(c, sub, "the property %s is not among 'propertyNames'", n->keys[p]), -1;
        }
      }
      json_decref(names);
      n->free = 0;
    } else {
      jc_node *kn = node_new(c);
      kn->types = TY_STR;
      if (get_count(c, pnames, "minLength", sub, &kn->min_len) || get_count(c, pnames, "maxLength", sub, &kn->max_len))
        return -1;
      if (kn->max_len >= 0 && kn->min_len > kn->max_len) return fail(c, sub, "minLength > maxLength"), -1;
      if (kn->max_len == 0) return fail(c, sub, "'maxLength' 0 leaves only the empty name"), -1;
      n->names = kn;
      for (int p = 0; p < n->n_props; p++) {
        long len = (long)n->key_lens[p] - 2;
        if (len < kn->min_len || (kn->max_len >= 0 && len > kn->max_len))
          return fail(c, sub, "the property %s does not satisfy 'propertyNames'", n->keys[p]), -1;
      }
    }
  }
  json_t *req = json_object_get(sch, "required");
  if (req) {
    snprintf(sub, sizeof sub, "%s.required", path);
    if (!json_is_array(req)) return fail(c, sub, "'required' must be an array of names"), -1;
    for (size_t i = 0; i < json_array_size(req); i++) {
      json_t *r = json_array_get(req, i);
      int found = json_is_string(r) ? key_index(n, json_string_value(r)) : -1;
      if (found < 0)
        return fail(c, sub, "required property \"%.60s\" is not in 'properties'",
                    json_is_string(r) ? json_string_value(r) : "?"), -1;
      n->required |= 1ULL << found;
    }
  }
  if (get_count(c, sch, "minProperties", path, &n->min_props) ||
      get_count(c, sch, "maxProperties", path, &n->max_props))
    return -1;
  int n_req = __builtin_popcountll(n->required);
  if (n->max_props >= 0 && n->max_props < n_req) {
    snprintf(sub, sizeof sub, "%s.maxProperties", path);
    return fail(c, sub, "maxProperties %ld is below the %d required properties", n->max_props, n_req), -1;
  }
  long most = n->n_props + (n->free ? JC_MAX_FREE_KEYS : 0);
  if (n->min_props > most || (n->max_props >= 0 && n->min_props > n->max_props)) {
    snprintf(sub, sizeof sub, "%s.minProperties", path);
    return fail(c, sub, "minProperties %ld cannot be met (at most %ld properties%s)", n->min_props,
                n->max_props >= 0 && n->max_props < most ? n->max_props : most,
                n->free ? ", counting the free keys the server writes" : ""), -1;
  }
  return 0;
}

static int node_accepts(const jc_node *n, const char *text);

/* the number of constraining keywords in schema sch (annotations aside); -1: an unknown keyword */
static int count_constraining(cctx *c, json_t *sch, const char *path) {
  char sub[300];
  const char *k;
  json_t *v;
  int constraining = 0;
  json_object_foreach(sch, k, v) {
    if (!known(k)) {
      snprintf(sub, sizeof sub, "%s.%.100s", path, k);
      fail(c, sub, "the keyword '%s' is not supported", k);
      return -1;
    }
    if (!is_annotation(k)) constraining++;
  }
  return constraining;
}

/* the value a local JSON pointer ("#/a/b~1c") names within root; NULL: it does not resolve */
static json_t *resolve_ref(json_t *root, const char *r) {
  json_t *t = root;
  char tok[256];
  const char *p = r + 1;
  while (*p == '/' && t) {
    p++;
    size_t n = strcspn(p, "/");
    size_t o = 0;
    for (size_t j = 0; j < n && o + 1 < sizeof tok; j++) { /* ~1 -> /, ~0 -> ~ */
      if (p[j] == '~' && j + 1 < n && (p[j + 1] == '0' || p[j + 1] == '1')) {
        tok[o++] = p[j + 1] == '1' ? '/' : '~';
        j++;
      } else {
        tok[o++] = p[j];
      }
    }
    tok[o] = 0;
    t = json_object_get(t, tok);
    p += n;
  }
  return *p ? NULL : t;
}

/* "$ref": v: its target, compiled once behind an alias node (so a recursive schema refers back) */
static const jc_node *compile_ref(cctx *c, json_t *v, const char *path, int depth) {
  char sub[300];
  const char *r = json_is_string(v) ? json_string_value(v) : "";
  snprintf(sub, sizeof sub, "%s.$ref", path);
  if (r[0] != '#') return fail(c, sub, "only local $ref (\"#/...\") are supported");
  json_t *t = resolve_ref(c->root, r);
  if (!t) return fail(c, sub, "$ref \"%.100s\" does not resolve", r);
  for (int j = 0; j < c->n_refs; j++) /* compiled once: a recursive schema refers back */
    if (c->ref_t[j] == t) return c->ref_n[j];
  jc_node *a = node_new(c);
  a->pending = 1;
  c->ref_t = xrealloc(c->ref_t, sizeof *c->ref_t * (size_t)(c->n_refs + 1));
  c->ref_n = xrealloc(c->ref_n, sizeof *c->ref_n * (size_t)(c->n_refs + 1));
  c->ref_t[c->n_refs] = t;
  c->ref_n[c->n_refs++] = a;
  const jc_node *target = compile(c, t, sub, depth + 1);
  if (!target) return NULL;
  a->alias = target;
  a->pending = 0;
  return a;
}

/* "allOf": v: supported with exactly one schema, which it is */
static const jc_node *compile_all_of(cctx *c, json_t *v, const char *path, int depth) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s.allOf", path);
  if (!json_is_array(v) || json_array_size(v) != 1)
    return fail(c, sub, "'allOf' is supported with exactly one schema");
  snprintf(sub, sizeof sub, "%s.allOf[0]", path);
  return compile(c, json_array_get(v, 0), sub, depth + 1);
}

/* $ref, anyOf, oneOf or allOf, which stand alone (annotations aside); *found: sch has one */
static const jc_node *compile_combinator(cctx *c, json_t *sch, const char *path, int depth,
                                         int constraining, int *found) {
  static const char *const alone[] = {"$ref", "anyOf", "oneOf", "allOf"};
  char sub[300];
  json_t *v;
  *found = 1;
  for (int i = 0; i < 4; i++) {
    if (!(v = json_object_get(sch, alone[i]))) continue;
    if (constraining > 1) {
      snprintf(sub, sizeof sub, "%s.%s", path, alone[i]);
      return fail(c, sub, "'%s' beside other constraining keywords is not supported (only "
                          "annotations such as title, description, default may sit beside it)", alone[i]);
    }
    if (i == 0) return compile_ref(c, v, path, depth);
    if (i == 3) return compile_all_of(c, v, path, depth);
    return compile_any_of(c, v, path, alone[i], depth);
  }
  *found = 0;
  return NULL;
}

/* "type" (a name or a list) into TY_ bits; without it, guessed from properties / items */
static int compile_types(cctx *c, json_t *sch, const char *path, unsigned *types) {
  char sub[300];
  json_t *ty = json_object_get(sch, "type");
  *types = 0;
  if (ty) {
    snprintf(sub, sizeof sub, "%s.type", path);
    if (!json_is_string(ty) && !json_is_array(ty)) {
      fail(c, sub, "'type' must be a type name or a list of them");
      return -1;
    }
    if (json_is_array(ty) && json_array_size(ty) == 0) {
      fail(c, sub, "'type' is an empty list: no value has no type");
      return -1;
    }
  }
  for (size_t i = 0; ty && i < (json_is_array(ty) ? json_array_size(ty) : 1); i++) {
    json_t *t = json_is_array(ty) ? json_array_get(ty, i) : ty;
    const char *s = json_is_string(t) ? json_string_value(t) : "";
    if (!strcmp(s, "null")) *types |= TY_NULL;
    else if (!strcmp(s, "boolean")) *types |= TY_BOOL;
    else if (!strcmp(s, "integer")) *types |= TY_INT;
    else if (!strcmp(s, "number")) *types |= TY_NUM;
    else if (!strcmp(s, "string")) *types |= TY_STR;
    else if (!strcmp(s, "array")) *types |= TY_ARR;
    else if (!strcmp(s, "object")) *types |= TY_OBJ;
    else {
      fail(c, sub, "unknown type \"%.40s\"", s);
      return -1;
    }
  }
  if (!ty) {
    if (json_object_get(sch, "properties")) *types = TY_OBJ;
    else if (json_object_get(sch, "items") || json_object_get(sch, "prefixItems")) *types = TY_ARR;
    else *types = TY_ANY;
  }
  return 0;
}

/* minLength / maxLength and minItems / maxItems, each pair consistent */
static int compile_lengths(cctx *c, json_t *sch, jc_node *n, const char *path) {
  char sub[300];
  if (get_count(c, sch, "minLength", path, &n->min_len) ||
      get_count(c, sch, "maxLength", path, &n->max_len) ||
      get_count(c, sch, "minItems", path, &n->min_items) ||
      get_count(c, sch, "maxItems", path, &n->max_items))
    return -1;
  if (n->max_len >= 0 && n->min_len > n->max_len) {
    snprintf(sub, sizeof sub, "%s.minLength", path);
    fail(c, sub, "minLength > maxLength");
    return -1;
  }
  if (n->max_items >= 0 && n->min_items > n->max_items) {
    snprintf(sub, sizeof sub, "%s.minItems", path);
    fail(c, sub, "minItems > maxItems");
    return -1;
  }
  return 0;
}

/* prefixItems and items (false: no items beyond the prefix) */
static int compile_array(cctx *c, json_t *sch, jc_node *n, const char *path, int depth) {
  char sub[300];
  json_t *v, *pre = json_object_get(sch, "prefixItems");
  if (pre) {
    snprintf(sub, sizeof sub, "%s.prefixItems", path);
    if (!json_is_array(pre) || json_array_size(pre) > MAX_OPTIONS) {
      fail(c, sub, "'prefixItems' must be an array of at most %d schemas", MAX_OPTIONS);
      return -1;
    }
    n->n_prefix = (int)json_array_size(pre);
    n->prefix = xcalloc((size_t)(n->n_prefix ? n->n_prefix : 1), sizeof *n->prefix);
    for (int i = 0; i < n->n_prefix; i++) {
      snprintf(sub, sizeof sub, "%s.prefixItems[%d]", path, i);
      if (!(n->prefix[i] = compile(c, json_array_get(pre, (size_t)i), sub, depth + 1))) return -1;
    }
  }
  if ((v = json_object_get(sch, "items"))) {
    snprintf(sub, sizeof sub, "%s.items", path);
    if (json_is_array(v)) {
      fail(c, sub, "tuple 'items' (an array) is not supported: use prefixItems");
      return -1;
    }
    if (json_is_false(v)) n->items_false = 1;
    else if (!(n->items = compile(c, v, sub, depth + 1))) return -1;
  }
  if (n->items_false && (n->types & TY_ARR)) {
    if (n->max_items < 0 || n->max_items > n->n_prefix) n->max_items = n->n_prefix;
    if (n->min_items > n->max_items) {
      snprintf(sub, sizeof sub, "%s.minItems", path);
      fail(c, sub, "minItems %ld but 'items' false allows at most %d items", n->min_items,
           n->n_prefix);
      return -1;
    }
  }
  return 0;
}

/* enum / const: the options are the whole set, each checked against the rest of the schema (n);
 * typed: the schema declares 'type' */
static const jc_node *compile_enum(cctx *c, json_t *en, json_t *cn, const jc_node *n,
                                   const char *path, int typed) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s.%s", path, cn ? "const" : "enum");
  if (en && (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > MAX_OPTIONS))
    return fail(c, sub, "'enum' must be an array of 1 to %d values", MAX_OPTIONS);
  jc_node *l = node_new(c);
  if (cn) {
    int in = !en;
    for (size_t i = 0; en && i < json_array_size(en); i++)
      in |= json_equal(json_array_get(en, i), cn);
    if (!in) return fail(c, sub, "'const' is not among the 'enum' values");
    add_lit(l, cn);
  } else {
    for (size_t i = 0; i < json_array_size(en); i++) add_lit(l, json_array_get(en, i));
  }
  for (int i = 0; i < l->n_lits; i++) {
    if (node_accepts(n, l->lits[i])) continue;
    if (en && !cn) snprintf(sub, sizeof sub, "%s.enum[%d]", path, i);
    return fail(c, sub, "the value %.80s contradicts the rest of the schema (type %s)", l->lits[i],
                typed ? "declared" : "any");
  }
  return l;
}

/* one schema (at path, nested depth deep) into its node: a combinator stands alone; otherwise the
 * keywords of each type fill one node, narrowed to the enum / const options if any */
static const jc_node *compile(cctx *c, json_t *sch, const char *path, int depth) {
  if (depth > JC_MAX_DEPTH)
    return fail(c, path, "nests deeper than %d levels (a recursive $ref?)", JC_MAX_DEPTH);
  if (c->n_nodes >= MAX_NODES)
    return fail(c, path, "more than %d schema nodes (after expanding $ref)", MAX_NODES);
  if (json_is_true(sch)) return &any_node;
  if (json_is_false(sch)) return fail(c, path, "the schema false matches nothing");
  if (!json_is_object(sch)) return fail(c, path, "a schema must be an object");
  int constraining = count_constraining(c, sch, path), found;
  if (constraining < 0) return NULL;
  const jc_node *combined = compile_combinator(c, sch, path, depth, constraining, &found);
  if (found) return combined;
  jc_node *n = node_new(c);
  if (compile_types(c, sch, path, &n->types) || compile_lengths(c, sch, n, path) ||
      compile_number(c, sch, n, path) || compile_string(c, sch, n, path) ||
      compile_array(c, sch, n, path, depth) || compile_object(c, sch, n, path, depth))
    return NULL;
  json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
  if (en || cn) return compile_enum(c, en, cn, n, path, json_object_get(sch, "type") != NULL);
  return n;
}

/* ---- heights: how many containers a value must still open to end, so that nesting never
 * runs into JC_MAX_DEPTH with a value that cannot end (recursive schemas) ---- */
#define H_INF (1 << 20)

static int H(const jc_node *n) { return D(n)->height; }
static int hmax(int a, int b) { return a > b ? a : b; }
static int hmin(int a, int b) { return a < b ? a : b; }

static void node_heights(jc_node *n) {
  if (n->alias) {
    n->height = H(n);
    return;
  }
  if (n->n_lits && !n->types && !n->n_branches) {
    n->height = 0;
    return;
  }
  if (n->disc || n->keyunion) {
    int h = n->keyunion && n->min_props == 0 ? 1 : H_INF;
    for (int i = 0; i < n->n_branches; i++) h = hmin(h, D(n->branches[i])->h_obj);
    n->h_obj = n->height = h;
    return;
  }
  if (n->n_branches) {
    int h = H_INF;
    for (int i = 0; i < n->n_branches; i++) h = hmin(h, H(n->branches[i]));
    n->height = h;
    return;
  }
  int h = H_INF;
  if (n->types & TY_OBJ) {
    int m = 0, all = n->min_props > __builtin_popcountll(n->required);
    for (int i = 0; i < n->n_props; i++)
      if (all || (n->required >> i & 1)) m = hmax(m, H(n->props[i]));
    if (all && n->free && n->addl) m = hmax(m, H(n->addl));
    n->h_obj = hmin(H_INF, 1 + m);
    h = hmin(h, n->h_obj);
  }
  if (n->types & TY_ARR) {
    int m = 0;
    for (long i = 0; i < n->min_items && i <= n->n_prefix; i++)
      m = hmax(m, H(i < n->n_prefix ? n->prefix[i] : n->items ? n->items : &any_node));
    n->h_arr = hmin(H_INF, 1 + m);
    h = hmin(h, n->h_arr);
  }
  if (n->types & (TY_NULL | TY_BOOL | TY_INT | TY_NUM | TY_STR)) h = 0;
  n->height = h;
}

static void compute_heights(jc_schema *s) {
  for (jc_node *n = s->nodes; n; n = n->next_alloc) n->height = n->h_obj = n->h_arr = H_INF;
  for (int changed = 1; changed;) { /* a fixed point: heights only come down */
    changed = 0;
    for (jc_node *n = s->nodes; n; n = n->next_alloc) {
      int h = n->height, ho = n->h_obj, ha = n->h_arr;
      node_heights(n);
      changed |= n->height != h || n->h_obj != ho || n->h_arr != ha;
    }
  }
}

jc_schema *jc_compile_at(json_t *schema, int object_only, char *err, size_t cap, char *path,
                         size_t path_cap) {
  jc_schema *s = xcalloc(1, sizeof *s);
  s->refs = 1;
  if (path && path_cap) path[0] = 0;
  cctx c = {s, schema, err, cap, path, path_cap, 0, 0, RE_BUDGET, NULL, NULL, 0};
  if (!schema) {
    jc_node *n = node_new(&c);
    n->types = object_only ? TY_OBJ : TY_ANY;
    n->free = 1;
    s->root = n;
    return s;
  }
  s->root = compile(&c, schema, "", 0);
  free(c.ref_t);
  free(c.ref_n);
  if (s->root) {
    compute_heights(s);
    if (H(s->root) > JC_MAX_DEPTH) {
      fail(&c, "", "no value of the schema ends within %d nested containers (a $ref required "
                   "at every level of itself?)", JC_MAX_DEPTH);
      s->root = NULL;
    }
  }
  if (!s->root) {
    jc_schema_free(s);
    return NULL;
  }
  return s;
}

jc_schema *jc_compile(json_t *schema, int object_only, char *err, size_t cap) {
  return jc_compile_at(schema, object_only, err, cap, NULL, 0);
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
#define NO_DOT 0xFF

static jc_frame *push(jc_state *st, int kind, const jc_node *n) {
  if (st->depth >= JC_MAX_FRAMES) return NULL;
  jc_frame *f = &st->f[st->depth++];
  memset(f, 0, offsetof(jc_frame, free_keys)); /* the key hashes: only up to n_free are read */
  f->kind = (uint8_t)kind;
  f->node = D(n);
  f->prop = -1;
  return f;
}

void jc_init(jc_state *st, const jc_schema *s) {
  st->schema = s;
  st->depth = 0;
  st->nest = 0;
  st->done = 0;
  st->lit_opt = -1;
  push(st, K_VALUE, s->root);
}

static void copy_state(jc_state *d, const jc_state *s) {
  d->schema = s->schema;
  d->depth = s->depth;
  d->nest = s->nest;
  d->done = s->done;
  d->lit_opt = s->lit_opt;
  memcpy(d->f, s->f, sizeof *s->f * (size_t)s->depth);
}

static void value_done(jc_state *st) {
  if (st->depth == 0) {
    st->done = 1;
    return;
  }
  jc_frame *p = &st->f[st->depth - 1];
  if (p->kind != K_OBJ) return;
  p->sub = O_AFTER;
  if (p->node->disc && st->lit_opt >= 0) { /* the discriminator's value picks the branch */
    const jc_node *d = p->node;
    int b = d->props[0]->lit_branch[st->lit_opt];
    p->node = D(d->branches[b]);
    p->mask = 1ULL << d->disc_idx[b];
  }
}

static void key_done(jc_state *st, int idx) {
  jc_frame *p = &st->f[st->depth - 1]; /* the object */
  if (p->node->keyunion && idx >= 0) { /* the first key picks the first branch listing it */
    const jc_node *u = p->node;
    for (int b = 0; b < u->n_branches; b++)
      for (int j = 0; j < u->branches[b]->n_props; j++)
        if (!strcmp(u->branches[b]->keys[j], u->keys[idx])) {
          p->node = u->branches[b];
          idx = j;
          b = u->n_branches;
          break;
        }
  }
  p->prop = (int16_t)idx;
  if (idx >= 0) p->mask |= 1ULL << idx;
  p->count++;
  p->sub = O_COLON;
}

static void lit_opts(const jc_frame *f, char ***o, size_t **l, int *n) {
  if (f->is_key) *o = f->node->keys, *l = f->node->key_lens, *n = f->node->n_props;
  else *o = f->node->lits, *l = f->node->lit_lens, *n = f->node->n_lits;
}

static void lit_end(jc_state *st, int option) {
  jc_frame *f = &st->f[st->depth - 1];
  int key = f->is_key, has_branch = !key && f->node->lit_branch;
  st->depth--;
  st->lit_opt = has_branch ? option : -1;
  if (key) key_done(st, option);
  else value_done(st);
  st->lit_opt = -1;
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
  lit_end(st, complete);
}

static int is_ws(unsigned c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_hex(unsigned c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static uint64_t all_props(const jc_node *n) { return n->n_props == 64 ? ~0ULL : (1ULL << n->n_props) - 1; }

/* keys that may start now: listed ones (*listed) and whether a free key may */
static void keys_open(const jc_state *st, const jc_frame *o, uint64_t *listed, int *free_ok) {
  const jc_node *n = o->node;
  uint64_t unwritten = all_props(n) & ~o->mask;
  uint64_t req_left = n->required & ~o->mask;
  int room = n->max_props < 0 || o->count + 1 + __builtin_popcountll(req_left) <= n->max_props;
  /* an optional key whose value could not end within the nesting left is not begun */
  for (int i = 0; i < n->n_props; i++)
    if ((unwritten >> i & 1) && !(req_left >> i & 1) && st->nest + H(n->props[i]) > JC_MAX_DEPTH)
      unwritten &= ~(1ULL << i);
  *listed = room ? unwritten : req_left;
  *free_ok = room && n->free && o->n_free < JC_MAX_FREE_KEYS && !n->disc &&
             (!n->addl || st->nest + H(n->addl) <= JC_MAX_DEPTH);
}

static int start_key(jc_state *st) {
  jc_frame *o = &st->f[st->depth - 1];
  const jc_node *n = o->node;
  uint64_t listed;
  int free_ok;
  keys_open(st, o, &listed, &free_ok);
  o->sub = O_INKEY;
  if (!free_ok) {
    if (!listed) return -1;
    jc_frame *f = push(st, K_LIT, n);
    if (!f) return -1;
    f->is_key = 1;
    f->mask = listed;
    f->count = 1; /* every key starts with its quote */
    return 0;
  }
  jc_frame *f = push(st, K_STR, n->names ? n->names : &key_node);
  if (!f) return -1;
  f->is_key = 1;
  f->mask = all_props(n); /* listed keys the text still matches */
  f->pos = 1;
  f->h = 2166136261u;
  return 0;
}

static int required_met(const jc_frame *f) {
  return (f->node->required & ~f->mask) == 0 && f->count >= f->node->min_props;
}

static int keys_left(const jc_state *st, const jc_frame *f) {
  uint64_t listed;
  int free_ok;
  if (f->node->max_props >= 0 && f->count >= f->node->max_props) return 0;
  keys_open(st, f, &listed, &free_ok);
  return listed || free_ok;
}

static void close_container(jc_state *st) {
  st->nest--;
  st->depth--;
  value_done(st);
}

/* a free key ending with the bytes so far: its listed index, -1 free, -2 refused (written) */
static int free_key_end(const jc_state *st, uint64_t mask, int pos, uint32_t h) {
  const jc_frame *o = &st->f[st->depth - 2];
  const jc_node *n = o->node;
  for (int i = 0; i < n->n_props; i++)
    if ((mask >> i & 1) && n->key_lens[i] == (size_t)pos + 1 && n->keys[i][pos] == '"')
      return (o->mask >> i & 1) ? -2 : i;
  for (int i = 0; i < o->n_free; i++)
    if (o->free_keys[i] == h) return -2;
  return -1;
}

static int listed_ok(const jc_state *st, const jc_frame *o, int i) {
  uint64_t listed;
  int free_ok;
  keys_open(st, o, &listed, &free_ok);
  return listed >> i & 1;
}

/* a free key's next raw byte (not the closing quote) */
static int free_key_byte(jc_state *st, jc_frame *f, unsigned c) {
  const jc_frame *o = &st->f[st->depth - 2];
  const jc_node *n = o->node;
  uint64_t m = 0;
  for (int i = 0; i < n->n_props; i++)
    if ((f->mask >> i & 1) && n->key_lens[i] > (size_t)f->pos && (unsigned char)n->keys[i][f->pos] == c)
      m |= 1ULL << i;
  uint32_t h = (f->h ^ c) * 16777619u;
  /* at the longest a name may be, the key must end with the next byte: refuse now if it cannot */
  if (f->node->max_len >= 0 && c >= 0x80) return -1; /* bounded names: ASCII, see below */
  if (f->node->max_len >= 0 && f->units + 1 >= f->node->max_len) {
    int e = free_key_end(st, m, f->pos + 1, h);
    if (e == -2 || (e >= 0 && !listed_ok(st, o, e))) return -1;
  }
  f->mask = m;
  f->h = h;
  f->pos++;
  return 0;
}

/* bounded numbers: whether some value reachable from the digits so far lies in [lo, hi] (and is a
 * multiple) */
static int num_feasible(const jc_node *n, const jc_frame *f) {
  int F = n->frac;
  int64_t a[2];
  if (f->frac != NO_DOT) { /* fraction digits: the value is fixed up to the digits still to come */
    int64_t s = P10[F - f->frac];
    a[0] = f->acc * s;
    a[1] = (f->acc + 1) * s - 1;
    if (f->neg) {
      int64_t t = a[0];
      a[0] = -a[1], a[1] = -t;
    }
    return has_multiple(a[0] > n->lo ? a[0] : n->lo, a[1] < n->hi ? a[1] : n->hi, n->mult);
  }
  int k = f->lo; /* integer digits so far */
  int maxj = k == 0 ? n->int_digits : (f->acc == 0 ? 0 : n->int_digits - k);
  for (int j = k == 0 ? n->int_digits : 0; j <= maxj; j++) {
    if (k == 0) a[0] = 0, a[1] = P10[n->int_digits + F] - 1;
    else a[0] = f->acc * P10[j + F], a[1] = (f->acc + 1) * P10[j + F] - 1;
    if (f->neg) {
      int64_t t = a[0];
      a[0] = -a[1], a[1] = -t;
    }
    if (has_multiple(a[0] > n->lo ? a[0] : n->lo, a[1] < n->hi ? a[1] : n->hi, n->mult)) return 1;
  }
  return 0;
}

/* the exact value of a bounded number that ends here is allowed */
static int num_value_ok(const jc_node *n, const jc_frame *f) {
  int64_t v = f->frac == NO_DOT ? f->acc * P10[n->frac] : f->acc * P10[n->frac - f->frac];
  if (f->neg) v = -v;
  return v >= n->lo && v <= n->hi && (!n->mult || v % n->mult == 0);
}

static int bounded_num_step(jc_state *st, jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  int digit = c >= '0' && c <= '9';
  jc_frame t = *f;
  switch (f->sub) {
    case N_SIGN:
      if (!digit) return 1;
      t.sub = c == '0' ? N_ZERO : N_INT;
      t.lo = 1;
      t.acc = (int64_t)(c - '0');
      break;
    case N_ZERO:
    case N_INT:
      if (digit && f->sub == N_INT && f->lo < n->int_digits) {
        t.lo++;
        t.acc = f->acc * 10 + (c - '0');
      } else if (c == '.' && n->frac) {
        t.sub = N_DOT;
        t.frac = 0;
      } else {
        return 1;
      }
      break;
    case N_DOT:
    case N_FRAC:
      if (!digit || f->frac >= n->frac) return 1;
      t.sub = N_FRAC;
      t.frac++;
      t.acc = f->acc * 10 + (c - '0');
      break;
    default:
      return 1;
  }
  (void)st;
  if (!num_feasible(n, &t)) return -1;
  *f = t;
  return 0;
}

/* a pattern string's next decoded byte d */
static int re_byte(jc_frame *f, unsigned d) {
  const jc_node *n = f->node;
  uint16_t t = n->re->next[(size_t)f->re * 256 + d];
  if (t == JC_RE_NONE) return -1;
  int32_t count = f->count + ((d & 0xC0) != 0x80);
  if (n->max_len >= 0 && count > n->max_len) return -1;
  if (!jc_re_len_ok(n->re, t, n->min_len - count, n->max_len < 0 ? -1 : n->max_len - count)) return -1;
  f->re = t;
  f->count = count;
  f->units = count;
  return 0;
}

static const char esc_from[] = "\"\\/nrtbf", esc_to[] = "\"\\/\n\r\t\b\f";

/* what a frame's step did with byte c (step() loops on the last two) */
enum {
  STEP_REFUSED = -1, /* c may not come here */
  STEP_TAKEN = 0,    /* c is consumed */
  STEP_ENDED = 1,    /* the frame on top was complete and is popped: c goes to the frame below */
  STEP_STARTED = 2   /* a child frame was pushed: c is its first byte */
};

static int step(jc_state *st, unsigned c);

/* K_VALUE of an anyOf / oneOf: the first branch (in order) that takes c becomes the value */
static int value_first_branch(jc_state *st, const jc_node *n, unsigned c) {
  for (int i = 0; i < n->n_branches; i++) {
    jc_state t;
    copy_state(&t, st);
    t.f[t.depth - 1].node = D(n->branches[i]);
    if (step(&t, c) == 0) {
      copy_state(st, &t);
      return STEP_TAKEN;
    }
  }
  return STEP_REFUSED;
}

/* K_VALUE becomes K_NUM: c is '-' or a digit (bounded numbers: refused unless some allowed value
 * can still be written) */
static int value_start_number(jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  if (n->bounded) {
    jc_frame t = *f;
    t.kind = K_NUM;
    t.frac = NO_DOT;
    t.neg = c == '-';
    t.sub = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
    t.lo = c != '-';
    t.acc = c == '-' ? 0 : (int64_t)(c - '0');
    if (c == '-' && n->lo >= 0) return STEP_REFUSED; /* no "-0" */
    if (!num_feasible(n, &t)) return STEP_REFUSED;
    *f = t;
    return STEP_TAKEN;
  }
  f->kind = K_NUM;
  f->sub = c == '-' ? N_SIGN : c == '0' ? N_ZERO : N_INT;
  f->count = 1;
  f->lo = f->sub == N_INT;
  return STEP_TAKEN;
}

/* K_VALUE becomes a literal of node lit (true/false/null) whose options in mask start with c */
static int value_start_keyword(jc_frame *f, const jc_node *lit, uint64_t mask) {
  f->kind = K_LIT;
  f->node = lit;
  f->mask = mask;
  f->count = 1;
  return STEP_TAKEN;
}

/* K_VALUE: the value's first byte picks what it is (an enum option, string, object, array, number,
 * boolean or null), within the nesting left */
static int step_value(jc_state *st, jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  if (n->n_branches && !n->disc && !n->keyunion) return value_first_branch(st, n, c);
  uint64_t m = 0;
  for (int i = 0; i < n->n_lits; i++)
    if ((unsigned char)n->lits[i][0] == c) m |= 1ULL << i;
  if (m) {
    f->kind = K_LIT;
    f->mask = m;
    f->count = 1;
    lit_maybe_end(st);
    return STEP_TAKEN;
  }
  if (c == '"' && (n->types & TY_STR)) {
    f->kind = K_STR;
    if (n->re && !jc_re_len_ok(n->re, 0, n->min_len, n->max_len)) return STEP_REFUSED;
    return STEP_TAKEN;
  }
  if (c == '{' && (n->types & TY_OBJ) && st->nest + hmax(1, n->h_obj) <= JC_MAX_DEPTH) {
    f->kind = K_OBJ;
    f->sub = O_FIRST;
    st->nest++;
    return STEP_TAKEN;
  }
  if (c == '[' && (n->types & TY_ARR) && st->nest + hmax(1, n->h_arr) <= JC_MAX_DEPTH) {
    f->kind = K_ARR;
    f->sub = A_FIRST;
    st->nest++;
    return STEP_TAKEN;
  }
  if ((c == '-' || (c >= '0' && c <= '9')) && (n->types & (TY_INT | TY_NUM)))
    return value_start_number(f, c);
  if ((c == 't' || c == 'f') && (n->types & TY_BOOL))
    return value_start_keyword(f, &bool_node, c == 't' ? 1 : 2);
  if (c == 'n' && (n->types & TY_NULL)) return value_start_keyword(f, &null_node, 1);
  return STEP_REFUSED;
}

/* K_STR inside a multi-byte UTF-8 character: c must be the continuation byte expected next */
static int string_continuation(jc_state *st, jc_frame *f, unsigned c) {
  if (c < f->lo || c > f->hi) return STEP_REFUSED;
  if (f->is_key && free_key_byte(st, f, c)) return STEP_REFUSED;
  f->left--;
  f->lo = 0x80;
  f->hi = 0xBF;
  return STEP_TAKEN;
}

/* K_STR after a backslash: the escape's letter, then a \u escape's four hex digits */
static int string_escape(jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  switch (f->sub) {
    case S_ESC:
      if (n->re) {
        const char *p = c ? strchr(esc_from, (int)c) : NULL;
        if (!p || re_byte(f, (unsigned char)esc_to[p - esc_from])) return STEP_REFUSED;
        f->sub = S_NORMAL;
        return STEP_TAKEN;
      }
      if (c && strchr("\"\\/bfnrt", (int)c)) f->sub = S_NORMAL;
      else if (c == 'u') f->sub = S_U1;
      else return STEP_REFUSED;
      return STEP_TAKEN;
    case S_U1:
      if (!is_hex(c)) return STEP_REFUSED;
      f->sub = c == 'd' || c == 'D' ? S_U2D : S_U2;
      return STEP_TAKEN;
    case S_U2D: /* no surrogates: \uD800-\uDFFF */
      if (!(c >= '0' && c <= '7')) return STEP_REFUSED;
      f->sub = S_U3;
      return STEP_TAKEN;
    case S_U2:
    case S_U3:
      if (!is_hex(c)) return STEP_REFUSED;
      f->sub++;
      if (f->sub == S_U2D) f->sub = S_U3; /* S_U2 -> S_U3 */
      return STEP_TAKEN;
    case S_U4:
      if (!is_hex(c)) return STEP_REFUSED;
      f->sub = S_NORMAL;
      return STEP_TAKEN;
  }
  return STEP_REFUSED;
}

/* K_STR's closing quote: the string needs its minimum length and an accepted pattern state; a free
 * key also must not repeat a key written before (or a listed key no longer open) */
static int string_close(jc_state *st, jc_frame *f) {
  const jc_node *n = f->node;
  if (f->count < n->min_len) return STEP_REFUSED;
  if (n->re && !n->re->accept[f->re]) return STEP_REFUSED;
  if (f->is_key) {
    int e = free_key_end(st, f->mask, f->pos, f->h);
    jc_frame *o = &st->f[st->depth - 2];
    if (e == -2 || (e >= 0 && !listed_ok(st, o, e))) return STEP_REFUSED;
    if (e == -1) o->free_keys[o->n_free++] = f->h;
    st->depth--;
    key_done(st, e);
    return STEP_TAKEN;
  }
  st->depth--;
  value_done(st);
  return STEP_TAKEN;
}

/* K_STR with a pattern / format: c (or, for a backslash, some escaped character) must move the
 * pattern's automaton */
static int string_pattern_byte(jc_frame *f, unsigned c) {
  if (c == '\\') { /* an escape, if some escaped character can follow */
    for (int i = 0; esc_to[i]; i++) {
      jc_frame t = *f;
      if (re_byte(&t, (unsigned char)esc_to[i]) == 0) {
        f->sub = S_ESC;
        return STEP_TAKEN;
      }
    }
    return STEP_REFUSED;
  }
  return re_byte(f, c);
}

/* K_STR without pattern: a raw byte within the length bounds; a UTF-8 lead byte sets the
 * continuation bytes expected (no overlongs, no surrogates, nothing beyond U+10FFFF) */
static int string_plain_byte(jc_state *st, jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  int free_key = f->is_key;
  if (free_key && c == '\\') return STEP_REFUSED; /* keys not listed: no escapes (no key twice) */
  if (n->max_len >= 0 && (f->units + (c >= 0xF0 ? 2 : 1) > n->max_len ||
                          n->max_len - f->units - (c >= 0xF0 ? 2 : 1) < n->min_len - f->count - 1))
    return STEP_REFUSED; /* beyond U+FFFF: two UTF-16 units (and minLength must stay reachable) */
  if (free_key && free_key_byte(st, f, c)) return STEP_REFUSED;
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
  else return STEP_REFUSED;
  return STEP_TAKEN;
}

/* K_STR (a value or a free key): dispatches on where in the string c falls */
static int step_string(jc_state *st, jc_frame *f, unsigned c) {
  if (f->left) return string_continuation(st, f, c);
  if (f->sub != S_NORMAL) return string_escape(f, c);
  if (c == '"') return string_close(st, f);
  if (c < 0x20) return STEP_REFUSED;
  if (f->node->re) return string_pattern_byte(f, c);
  return string_plain_byte(st, f, c);
}

/* K_NUM, bounded: digits that keep an allowed value reachable; any other byte ends the number if
 * it is complete and its value allowed */
static int step_bounded_number(jc_state *st, jc_frame *f, unsigned c) {
  int r = bounded_num_step(st, f, c);
  if (r <= 0) return r;
  if (f->sub == N_SIGN || f->sub == N_DOT || !num_value_ok(f->node, f)) return STEP_REFUSED;
  st->depth--;
  value_done(st);
  return STEP_ENDED;
}

/* a free number's grammar state after c (-1: c does not continue it); int_only: no '.' or
 * exponent */
static int number_next(const jc_frame *f, unsigned c, int int_only) {
  int digit = c >= '0' && c <= '9';
  int room = f->count <= MAX_NUMBER_BYTES - 3; /* an unfinished form can still finish */
  switch (f->sub) {
    case N_SIGN: return digit ? (c == '0' ? N_ZERO : N_INT) : -1;
    case N_ZERO:
      if (!int_only && c == '.' && room) return N_DOT;
      if (!int_only && (c == 'e' || c == 'E') && room) return N_E;
      return -1;
    case N_INT:
      if (digit && f->lo < MAX_INT_DIGITS) return N_INT;
      if (!int_only && c == '.' && room) return N_DOT;
      if (!int_only && (c == 'e' || c == 'E') && room) return N_E;
      return -1;
    case N_DOT: return digit ? N_FRAC : -1;
    case N_FRAC:
      if (digit) return N_FRAC;
      if ((c == 'e' || c == 'E') && room) return N_E;
      return -1;
    case N_E:
      if (c == '+' || c == '-') return N_ESIGN;
      return digit ? N_EXP : -1;
    case N_ESIGN: return digit ? N_EXP : -1;
    case N_EXP: return digit && f->exp_digits < 2 ? N_EXP : -1;
  }
  return -1;
}

/* K_NUM, unbounded: the JSON number grammar within MAX_NUMBER_BYTES; a byte that does not continue
 * a complete number ends it */
static int step_free_number(jc_state *st, jc_frame *f, unsigned c) {
  int next = number_next(f, c, !(f->node->types & TY_NUM));
  if (next >= 0 && f->count < MAX_NUMBER_BYTES) {
    if (next == N_EXP) f->exp_digits++;
    if (next == N_INT) f->lo++; /* integer-part digits */
    f->sub = (uint8_t)next;
    f->count++;
    return STEP_TAKEN;
  }
  if (f->sub == N_ZERO || f->sub == N_INT || f->sub == N_FRAC || f->sub == N_EXP) {
    st->depth--;
    value_done(st);
    return STEP_ENDED;
  }
  return STEP_REFUSED;
}

/* K_LIT (enum / const options, true/false/null, listed keys): c narrows the options still
 * matching; a value option complete here that others extended ends before c */
static int step_literal(jc_state *st, jc_frame *f, unsigned c) {
  char **o;
  size_t *l;
  int no, complete = -1;
  lit_opts(f, &o, &l, &no);
  uint64_t m = 0;
  for (int i = 0; i < no; i++) {
    if (!(f->mask >> i & 1)) continue;
    if (l[i] > (size_t)f->count && (unsigned char)o[i][f->count] == c) m |= 1ULL << i;
    if (l[i] == (size_t)f->count) complete = i;
  }
  if (m) {
    f->mask = m;
    f->count++;
    lit_maybe_end(st);
    return STEP_TAKEN;
  }
  if (complete >= 0 && !f->is_key) { /* an option that others extended ends here */
    lit_end(st, complete);
    return STEP_ENDED;
  }
  return STEP_REFUSED;
}

/* K_OBJ between its tokens: '}', a key's opening quote, ':' (pushes the value) or ',' */
static int step_object(jc_state *st, jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  switch (f->sub) {
    case O_FIRST:
      if (c == '}' && required_met(f)) {
        close_container(st);
        return STEP_TAKEN;
      }
      if (c == '"' && keys_left(st, f)) return start_key(st);
      return STEP_REFUSED;
    case O_KEY:
      return c == '"' ? start_key(st) : STEP_REFUSED;
    case O_COLON: {
      if (c != ':') return STEP_REFUSED;
      f->sub = O_VALUE;
      const jc_node *value = f->prop >= 0 ? n->props[f->prop] : n->addl ? n->addl : &any_node;
      return push(st, K_VALUE, value) ? STEP_TAKEN : STEP_REFUSED;
    }
    case O_AFTER:
      if (c == ',' && keys_left(st, f)) {
        f->sub = O_KEY;
        return STEP_TAKEN;
      }
      if (c == '}' && required_met(f)) {
        close_container(st);
        return STEP_TAKEN;
      }
      return STEP_REFUSED;
    default:
      return STEP_REFUSED;
  }
}

/* the schema of an array's item i (0-based) */
static const jc_node *array_item(const jc_node *n, long i) {
  return i < n->n_prefix ? n->prefix[i] : n->items ? n->items : &any_node;
}

/* K_ARR between its items: ']', ',' (pushes the next item), or the first item's first byte */
static int step_array(jc_state *st, jc_frame *f, unsigned c) {
  const jc_node *n = f->node;
  if (f->sub == A_FIRST) {
    if (c == ']' && n->min_items == 0) {
      close_container(st);
      return STEP_TAKEN;
    }
    if (n->max_items == 0) return STEP_REFUSED;
    if (n->min_items == 0 && st->nest + H(array_item(n, 0)) > JC_MAX_DEPTH) return STEP_REFUSED;
    f->count = 1;
    f->sub = A_AFTER;
    if (!push(st, K_VALUE, array_item(n, 0))) return STEP_REFUSED;
    return STEP_STARTED; /* c starts the first item */
  }
  if (c == ',' && (n->max_items < 0 || f->count < n->max_items) &&
      (f->count < n->min_items || st->nest + H(array_item(n, f->count)) <= JC_MAX_DEPTH)) {
    f->count++;
    return push(st, K_VALUE, array_item(n, f->count - 1)) ? STEP_TAKEN : STEP_REFUSED;
  }
  if (c == ']' && f->count >= n->min_items) {
    close_container(st);
    return STEP_TAKEN;
  }
  return STEP_REFUSED;
}

/* one byte through the frame stack: the frame on top takes c, refuses it, or ends and hands c
 * to the frame below (after the root: only whitespace) */
static int step(jc_state *st, unsigned c) {
  int reloop = 0; /* some frame ended before c */
  for (;;) {
    if (st->depth == 0) return st->done && reloop && is_ws(c) ? 0 : -1;
    jc_frame *f = &st->f[st->depth - 1];
    int r;
    switch (f->kind) {
      case K_VALUE: r = step_value(st, f, c); break;
      case K_STR: r = step_string(st, f, c); break;
      case K_NUM: r = f->node->bounded ? step_bounded_number(st, f, c) : step_free_number(st, f, c); break;
      case K_LIT: r = step_literal(st, f, c); break;
      case K_OBJ: r = step_object(st, f, c); break;
      case K_ARR: r = step_array(st, f, c); break;
      default: return STEP_REFUSED;
    }
    if (r == STEP_ENDED) reloop = 1;
    else if (r != STEP_STARTED) return r;
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

/* a literal's text is a complete value of node n (a root number ends with a space) */
static int node_accepts(const jc_node *n, const char *text) {
  jc_state t;
  t.schema = NULL;
  t.depth = 0;
  t.nest = 0;
  t.done = 0;
  t.lit_opt = -1;
  push(&t, K_VALUE, n);
  for (size_t i = 0; text[i]; i++)
    if (step(&t, (unsigned char)text[i])) return 0;
  if (!t.done && step(&t, ' ')) return 0;
  return t.done;
}
