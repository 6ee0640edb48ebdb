/*
 * adaptive.h: adaptive input embedding and adaptive log-softmax (internal to core/).
 */
#ifndef XL_ADAPTIVE_H
#define XL_ADAPTIVE_H

#include "internal.h"

void xl_embed(const xl_model *m, const int32_t *tokens, int n, float *x /* [n, d_model] */,
              float *scratch /* [d_embed] */);

size_t xl_output_scratch_floats(const xl_model *m);
/* For rows of hidden [rows, d_model]: if full && full[r], the whole log-distribution
 * [vocab] goes there; if targets && targets[r] >= 0, log p(targets[r]) goes to target_lp[r]. */
void xl_output_logprobs(const xl_model *m, const float *hidden, int rows, const int32_t *targets,
                        float *target_lp, float *const *full, float *scratch,
                        struct xl_pool *pool /* the owner's threads, or NULL */);

#endif
