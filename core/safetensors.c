/*
 * safetensors.c: opens a .safetensors file (8-byte header length, JSON header, raw
 * little-endian data), mmaps it read-only, and validates every entry (dtype, shape, offsets
 * inside the file, size == numel * dtype size, no overlaps) before anything reads it; gives
 * a tensor's pages back once the model holds its own copy. Any thread; used at model load.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_HEADER_BYTES (100u << 20)

static int dtype_from_name(const char *s, xl_dtype *dt, size_t *size) {
  if (!strcmp(s, "F32")) { *dt = XL_DT_F32; *size = 4; return 1; }
  if (!strcmp(s, "F16")) { *dt = XL_DT_F16; *size = 2; return 1; }
  if (!strcmp(s, "BF16")) { *dt = XL_DT_BF16; *size = 2; return 1; }
  return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
  const xl_tensor_entry *x = a, *y = b;
  return x->data < y->data ? -1 : x->data > y->data;
}

static xl_code parse_entry(const char *path, const char *name, json_t *info,
                           const uint8_t *data, size_t data_len, xl_tensor_entry *t,
                           xl_error *err) {
  json_t *jd = json_object_get(info, "dtype"), *js = json_object_get(info, "shape"),
         *jo = json_object_get(info, "data_offsets");
  if (!json_is_object(info) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
      json_array_size(jo) != 2)
    return xl_fail(err, XL_FORMAT, "%s: tensor '%s': header entry lacks dtype/shape/data_offsets",
                   path, name);
  size_t esize;
  if (!dtype_from_name(json_string_value(jd), &t->dtype, &esize))
    return xl_fail(err, XL_TENSOR, "%s: tensor '%s' has dtype %s (expected F32, F16 or BF16)",
                   path, name, json_string_value(jd));
  size_t nd = json_array_size(js);
  if (nd > 4)
    return xl_fail(err, XL_TENSOR, "%s: tensor '%s' has %zu dimensions", path, name, nd);
  t->ndim = (int)nd;
  uint64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(js, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1LL << 40))
      return xl_fail(err, XL_FORMAT, "%s: tensor '%s' has an invalid shape", path, name);
    t->shape[i] = json_integer_value(d);
    numel *= (uint64_t)t->shape[i];
    if (numel > (1ULL << 40))
      return xl_fail(err, XL_FORMAT, "%s: tensor '%s' is impossibly large", path, name);
  }
  json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
  if (!json_is_integer(jb) || !json_is_integer(je))
    return xl_fail(err, XL_FORMAT, "%s: tensor '%s' has non-integer data_offsets", path, name);
  json_int_t b = json_integer_value(jb), e = json_integer_value(je);
  if (b < 0 || e < b || (uint64_t)e > data_len)
    return xl_fail(err, XL_FORMAT,
                   "%s: tensor '%s' data_offsets [%lld, %lld] lie outside the file's %zu data "
                   "bytes (truncated file?)",
                   path, name, (long long)b, (long long)e, data_len);
  if ((uint64_t)(e - b) != numel * esize)
    return xl_fail(err, XL_FORMAT, "%s: tensor '%s' holds %lld bytes, its shape needs %llu", path,
                   name, (long long)(e - b), (unsigned long long)(numel * esize));
  t->data = data + b;
  t->nbytes = (size_t)(e - b);
  return XL_OK;
}

static xl_code parse_header(xl_safetensors *st, const char *json, size_t json_len,
                            const uint8_t *data, size_t data_len, xl_error *err) {
  json_error_t jerr;
  json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return xl_fail(err, XL_FORMAT, "%s: corrupt header JSON: %s", st->path, jerr.text);
  xl_code rc = XL_OK;
  if (!json_is_object(root)) {
    rc = xl_fail(err, XL_FORMAT, "%s: header is not a JSON object", st->path);
    goto out;
  }
  st->tensors = calloc(json_object_size(root) + 1, sizeof *st->tensors);
  if (!st->tensors) {
    rc = xl_fail(err, XL_NOMEM, "%s: out of memory reading the header", st->path);
    goto out;
  }
  const char *name;
  json_t *info;
  json_object_foreach(root, name, info) {
    if (!strcmp(name, "__metadata__")) continue;
    xl_tensor_entry *t = &st->tensors[st->n_tensors];
    if ((rc = parse_entry(st->path, name, info, data, data_len, t, err)) != XL_OK) goto out;
    if (!(t->name = strdup(name))) {
      rc = xl_fail(err, XL_NOMEM, "%s: out of memory", st->path);
      goto out;
    }
    st->n_tensors++;
  }
  /* Entries must not overlap (a crafted file could alias two tensors). */
  xl_tensor_entry *sorted = malloc((size_t)st->n_tensors * sizeof *sorted + 1);
  if (!sorted) {
    rc = xl_fail(err, XL_NOMEM, "%s: out of memory", st->path);
    goto out;
  }
  memcpy(sorted, st->tensors, (size_t)st->n_tensors * sizeof *sorted);
  qsort(sorted, (size_t)st->n_tensors, sizeof *sorted, cmp_by_offset);
  for (int i = 1; i < st->n_tensors; i++)
    if (sorted[i].data < sorted[i - 1].data + sorted[i - 1].nbytes && sorted[i].nbytes &&
        sorted[i - 1].nbytes) {
      rc = xl_fail(err, XL_FORMAT, "%s: tensors '%s' and '%s' overlap", st->path,
                   sorted[i - 1].name, sorted[i].name);
      break;
    }
  free(sorted);
out:
  json_decref(root);
  return rc;
}

xl_code xl_safetensors_open(const char *path, xl_safetensors *st, xl_error *err) {
  memset(st, 0, sizeof *st);
  st->path = path;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return xl_fail(err, XL_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return xl_fail(err, XL_IO, "%s: not a regular file", path);
  }
  size_t len = (size_t)sb.st_size;
  if (len < 8) {
    close(fd);
    return xl_fail(err, XL_FORMAT, "%s: file is %zu bytes, too short for a safetensors header",
                   path, len);
  }
  void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return xl_fail(err, XL_IO, "%s: mmap: %s", path, strerror(errno));
  st->map = map;
  st->map_len = len;
  const uint8_t *p = map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i]; /* little-endian */
  if (hlen == 0 || hlen > MAX_HEADER_BYTES || hlen > len - 8) {
    xl_safetensors_close(st);
    return xl_fail(err, XL_FORMAT,
                   "%s: header length %llu does not fit the file's %zu bytes (truncated or not "
                   "a safetensors file)",
                   path, (unsigned long long)hlen, len);
  }
  xl_code rc = parse_header(st, (const char *)p + 8, (size_t)hlen, p + 8 + hlen,
                            len - 8 - (size_t)hlen, err);
  if (rc != XL_OK) xl_safetensors_close(st);
  return rc;
}

void xl_safetensors_close(xl_safetensors *st) {
  if (st->tensors)
    for (int i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
  free(st->tensors);
  if (st->map) munmap(st->map, st->map_len);
  st->tensors = NULL;
  st->map = NULL;
  st->n_tensors = 0;
}

void xl_safetensors_release(const xl_safetensors *st, const xl_tensor_entry *t) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (uintptr_t)t->data, hi = lo + t->nbytes;
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
  if (!st->map || b <= a) return;
#if defined(MADV_DONTNEED)
  madvise((void *)a, (size_t)(b - a), MADV_DONTNEED); /* a hint: failure changes nothing */
#endif
}

xl_tensor_entry *xl_safetensors_find(xl_safetensors *st, const char *name) {
  for (int i = 0; i < st->n_tensors; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}
