/* Compiled as C (C99): proves attnlab.h is a valid C header and runs one forward through the C ABI, compared with
 * a direct computation. Exit status 0 on success. */
#include "attnlab/attnlab.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, T = 3, S = 5, N = 2, K = 1, H = 4 };

static float q[B][T][N][H], k[B][S][K][H], v[B][S][K][H], o[B][T][N][H], lse[B][N][T];

int main(void) {
  unsigned state = 12345u;
  int b, i, j, n, h;
  double max_err = 0.0;
  attnlab_context* ctx = NULL;
  attnlab_options options;
  attnlab_forward_args args;
  char ran[32];
  const int64_t q_shape[4] = {B, T, N, H}, kv_shape[4] = {B, S, K, H}, lse_shape[3] = {B, N, T};

  /* Deterministic non-zero inputs in [-1, 1]. */
  for (i = 0; i < B * T * N * H; ++i) {
    state = state * 1103515245u + 12345u;
    (&q[0][0][0][0])[i] = (float)((int)(state >> 16) % 1000 + 1) / 1000.0f * ((i & 1) ? 1.0f : -1.0f);
  }
  for (i = 0; i < B * S * K * H; ++i) {
    state = state * 1103515245u + 12345u;
    (&k[0][0][0][0])[i] = (float)((int)(state >> 16) % 1000 + 1) / 1000.0f;
    state = state * 1103515245u + 12345u;
    (&v[0][0][0][0])[i] = (float)((int)(state >> 16) % 1000 + 1) / 1000.0f * ((i % 3) ? 1.0f : -1.0f);
  }
  memset(o, 0xff, sizeof o); /* NaN poison */

  if (attnlab_context_create(&ctx) != ATTNLAB_OK) {
    fprintf(stderr, "context: %s\n", attnlab_last_error());
    return 1;
  }
  if (attnlab_options_init(&options) != ATTNLAB_OK || attnlab_forward_args_init(&args) != ATTNLAB_OK) {
    fprintf(stderr, "init: %s\n", attnlab_last_error());
    attnlab_context_destroy(ctx);
    return 1;
  }
  args.q = attnlab_tensor_contiguous(q, ATTNLAB_F32, ATTNLAB_CPU, 4, q_shape);
  args.k = attnlab_tensor_contiguous(k, ATTNLAB_F32, ATTNLAB_CPU, 4, kv_shape);
  args.v = attnlab_tensor_contiguous(v, ATTNLAB_F32, ATTNLAB_CPU, 4, kv_shape);
  args.o = attnlab_tensor_contiguous(o, ATTNLAB_F32, ATTNLAB_CPU, 4, q_shape);
  args.lse = attnlab_tensor_contiguous(lse, ATTNLAB_F32, ATTNLAB_CPU, 3, lse_shape);
  options.causal = 1;
  args.options = &options;
  if (attnlab_forward(ctx, &args, ran, sizeof ran) != ATTNLAB_OK) {
    fprintf(stderr, "forward: %s\n", attnlab_last_error());
    attnlab_context_destroy(ctx);
    return 1;
  }
  attnlab_context_destroy(ctx);

  /* Causal top-left: query i sees keys 0..i. */
  for (b = 0; b < B; ++b)
    for (n = 0; n < N; ++n)
      for (i = 0; i < T; ++i) {
        double s[S], m = -INFINITY, l = 0.0, out[H] = {0};
        for (j = 0; j <= i; ++j) {
          s[j] = 0.0;
          for (h = 0; h < H; ++h) s[j] += (double)q[b][i][n][h] * k[b][j][0][h];
          s[j] /= sqrt((double)H);
          if (s[j] > m) m = s[j];
        }
        for (j = 0; j <= i; ++j) {
          const double e = exp(s[j] - m);
          l += e;
          for (h = 0; h < H; ++h) out[h] += e * v[b][j][0][h];
        }
        for (h = 0; h < H; ++h) {
          const double err = fabs(out[h] / l - o[b][i][n][h]);
          if (isnan(err) || err > max_err) max_err = err; /* once NaN, stays NaN */
        }
        {
          const double err = fabs(m + log(l) - lse[b][n][i]);
          if (isnan(err) || err > max_err) max_err = err;
        }
      }
  printf("capi_smoke: path %s, max error %g\n", ran, max_err);
  return max_err <= 1e-5 ? 0 : 1;
}
