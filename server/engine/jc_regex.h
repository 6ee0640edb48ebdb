/*
 * jc_regex.h: the string languages of structured output: a bounded subset of ECMAScript regular
 * expressions (JSON Schema "pattern") and the built-in "format" grammars, compiled into
 * deterministic automata over the bytes of the decoded string (UTF-8). Every state kept can still
 * reach an accepting state, so a generator that follows the transitions never dead-ends; per
 * state, the lengths (in characters) an accepted completion can have are precomputed so that
 * minLength/maxLength combine with the pattern exactly (up to 62 characters; beyond that any
 * length the loop structure allows is assumed reachable).
 *
 * The subset: literals (UTF-8, within the BMP), '.', classes [...] with ranges and negation,
 * escapes \d \D \w \W \s \S \t \n \r \f \v \xHH \uHHHH and escaped punctuation, groups (...),
 * (?:...) and (?<name>...), alternation |, quantifiers ? * + {m} {m,} {m,n} (lazy forms too; m, n
 * at most 64), '^' only at the start and '$' only at the end (a pattern without them matches
 * anywhere, as JSON Schema says). Refused: lookaround, backreferences, \b \B, ^ or $ elsewhere,
 * ranges between non-ASCII characters. What is generated: '.', negated classes and \D \W \S
 * produce printable ASCII (0x20-0x7E) only, \s produces space, \t, \n and \r; control characters
 * other than \t \n \r are never produced.
 *
 * Threads: a compiled automaton is immutable (shared by every job using its schema). Pure.
 */
#ifndef XLS_JC_REGEX_H
#define XLS_JC_REGEX_H

#include <stddef.h>
#include <stdint.h>

#define JC_RE_NONE 0xFFFF
#define JC_RE_LENS_MAX 62 /* lens bit 63: some completion of 63 or more characters */

typedef struct jc_re {
  int n_states;        /* state 0 is the start */
  uint16_t *next;      /* [n_states][256]: JC_RE_NONE where the byte cannot come */
  uint8_t *accept;     /* [n_states] */
  uint64_t *lens;      /* [n_states]: bit n = an accepted completion of n more characters */
  int built;           /* states built before pruning (the compilation's cost) */
} jc_re;

/* A pattern's automaton, or NULL with the problem in err. max_states bounds the states built
 * (at most 4096 in any case): a caller's budget for the compilation's time. */
jc_re *jc_re_compile(const char *pattern, int max_states, char *err, size_t cap);
/* The automaton of a built-in format (date-time, date, time, email, uuid, uri, ipv4, ipv6), or
 * NULL (err: unknown format). */
jc_re *jc_re_format(const char *format, int max_states, char *err, size_t cap);
/* The strings both accept; NULL with a message when none. Frees neither. */
jc_re *jc_re_intersect(const jc_re *a, const jc_re *b, int max_states, char *err, size_t cap);
void jc_re_free(jc_re *r);
/* Whether an accepted completion from state s has a length in [lo, hi] more characters (hi < 0:
 * no upper bound). */
int jc_re_len_ok(const jc_re *r, int s, long lo, long hi);

#endif
