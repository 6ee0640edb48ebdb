/*
 * json_constraint.h: structured output. A JSON schema (the subset clients use) is compiled into
 * a tree of nodes; a small pushdown automaton over bytes follows a document being generated and
 * says which next bytes can still continue it into a valid document that validates against the
 * schema. The generator masks every token whose bytes are not accepted, so what it writes always
 * parses and validates; the document ends when its root value is complete.
 *
 * Supported schema keywords (docs/api.md, "Structured output: supported JSON Schema", lists them
 * with what is refused): type (a name or a non-empty list), enum and const (each option checked
 * against the rest of the schema), numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum,
 * multipleOf (integers); strings: minLength/maxLength (minLength in code points, as JSON Schema
 * counts; maxLength in UTF-16 code units, as JavaScript validators count), pattern and format
 * (jc_regex.h); arrays: items (a schema or false), prefixItems, minItems/maxItems; objects:
 * properties, required, additionalProperties (false, true or a schema), propertyNames,
 * minProperties/maxProperties; anyOf/oneOf (branches tried in order at the first byte; objects
 * that start alike are told apart by their first key; for oneOf, overlapping branches must
 * provably exclude each other, e.g. by a discriminator property whose const/enum values differ,
 * which is then written first); allOf with
 * one schema; $ref to "#/..." within the schema ($defs/definitions); annotations (title,
 * description, default, examples, $schema, $id, discriminator, ...). Any other keyword is refused
 * (compile error naming its path) rather than ignored. An object with properties and no
 * additionalProperties schema has only those properties (as OpenAI's strict mode); an object
 * without properties takes any keys (at most JC_MAX_FREE_KEYS keys not listed, never one twice).
 *
 * What is generated: compact JSON (no whitespace between tokens), valid UTF-8, escapes
 * \" \\ \/ \b \f \n \r \t \uXXXX (no lone surrogates), numbers of at most 32 bytes with at
 * most 15 integer digits and exponents of at most 2 digits, nesting of at most JC_MAX_DEPTH
 * containers. A root number (or a root enum whose options extend one another) ends with one
 * whitespace byte.
 *
 * Threads: a compiled schema is immutable (share it freely); a jc_state belongs to one thread
 * (the worker holding the job). Pure: no I/O.
 */
#ifndef XLS_JSON_CONSTRAINT_H
#define XLS_JSON_CONSTRAINT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JC_MAX_DEPTH 32
#define JC_MAX_FRAMES (2 * JC_MAX_DEPTH + 4)

typedef struct jc_node jc_node;
typedef struct jc_schema jc_schema;

#define JC_MAX_FREE_KEYS 16 /* keys not listed in 'properties', per object */

typedef struct jc_frame {
  const jc_node *node;
  int64_t acc;   /* bounded number: its digits so far as an integer (the dot ignored) */
  uint64_t mask; /* literal: options still possible; object: properties already written */
  int32_t count; /* string: code points; array: items; literal: bytes matched; number: bytes */
  int32_t units; /* string: UTF-16 code units (what JavaScript's length counts) */
  int16_t prop;  /* object: the property whose key was just read (-1: a free key) */
  uint8_t kind, sub;
  uint8_t is_key;           /* string or literal read as an object key */
  uint8_t left, lo, hi;     /* string: UTF-8 continuation bytes left and the next one's range */
  uint8_t exp_digits;       /* number: exponent digits */
  uint8_t frac, neg;        /* bounded number: fraction digits (0xFF: no dot yet), sign */
  uint16_t re;              /* string with a pattern/format: the automaton's state */
  int32_t pos;              /* free key: bytes so far (the quote included) */
  uint32_t h;               /* free key: hash of its bytes */
  uint8_t n_free;           /* object: free keys written */
  uint32_t free_keys[JC_MAX_FREE_KEYS]; /* object: their hashes */
} jc_frame;

typedef struct jc_state {
  const jc_schema *schema;
  int depth; /* frames in use */
  int nest;  /* containers open */
  int done;  /* the root value is complete: nothing more may follow */
  int lit_opt; /* the option of the literal completed last (discriminated unions) */
  jc_frame f[JC_MAX_FRAMES];
} jc_state;

/* Compiles schema (NULL: any JSON value; object_only: the root must be an object, as
 * response_format json_object). NULL with a message in err (the schema path and the problem). */
jc_schema *jc_compile(json_t *schema, int object_only, char *err, size_t cap);
/* The same, with the failing keyword's path within the schema in path (".properties.age.minimum",
 * "" for the root), for an error's param. */
jc_schema *jc_compile_at(json_t *schema, int object_only, char *err, size_t cap, char *path,
                         size_t path_cap);
/* Shared by several jobs (the choices of one request): each holds a reference; free drops one.
 * References are taken and dropped on one thread (the loop). */
jc_schema *jc_schema_ref(jc_schema *s);
void jc_schema_free(jc_schema *s);

void jc_init(jc_state *st, const jc_schema *s);
/* Consumes one byte: 0, or -1 when the byte cannot continue a valid document (st unchanged). */
int jc_step(jc_state *st, unsigned char c);
/* Whether the bytes could come next (st unchanged). */
int jc_accepts(const jc_state *st, const unsigned char *bytes, size_t n);
/* allowed[c] = 1 when byte c could come next. Returns the number allowed. */
int jc_allowed_bytes(const jc_state *st, uint8_t allowed[256]);
/* The document is complete. */
static inline int jc_done(const jc_state *st) { return st->done; }

#endif
