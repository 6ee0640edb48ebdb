/*
 * error.c: the xl_code name/text table and the error-filling helper (any thread).
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static const char *const CODE_NAMES[] = {
#define XL_ERROR_NAME(name, text) "XL_" #name,
    XL_ERROR_MAP(XL_ERROR_NAME)
#undef XL_ERROR_NAME
};

static const char *const CODE_TEXTS[] = {
#define XL_ERROR_TEXT(name, text) text,
    XL_ERROR_MAP(XL_ERROR_TEXT)
#undef XL_ERROR_TEXT
};

const char *xl_code_name(xl_code code) {
  return (unsigned)code < XL_ERROR_COUNT ? CODE_NAMES[code] : "XL_UNKNOWN";
}

const char *xl_code_text(xl_code code) {
  return (unsigned)code < XL_ERROR_COUNT ? CODE_TEXTS[code] : "unknown error";
}

xl_code xl_fail(xl_error *err, xl_code code, const char *fmt, ...) {
  if (err) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

void xl_error_clear(xl_error *err) {
  if (err) {
    err->code = XL_OK;
    err->message[0] = '\0';
  }
}
