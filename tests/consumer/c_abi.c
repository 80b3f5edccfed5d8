/* The C ABI from plain C: a causal, bottom-right-aligned forward, checked against attention computed here. */
#include <attnlab/attnlab.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 1, T = 3, S = 6, N = 2, H = 4 }; /* MHA: K and V have N heads too */

static float value_at(int i, int salt) { return sinf(0.29f * (float)i + 0.13f * (float)salt) * 0.9f; }

int check_c_abi(void) {
  float q[B * T * N * H], k[B * S * N * H], v[B * S * N * H], o[B * T * N * H];
  double o_ref[B * T * N * H];
  const int64_t q_shape[4] = {B, T, N, H}, kv_shape[4] = {B, S, N, H};
  attnlab_context* ctx = NULL;
  attnlab_options options;
  attnlab_forward_args args;
  char path[32];
  double err = 0;
  int i, n, j, h, bad = 0;
  attnlab_status st;

  for (i = 0; i < B * T * N * H; ++i) q[i] = value_at(i, 4), o[i] = -7.0f;
  for (i = 0; i < B * S * N * H; ++i) k[i] = value_at(i, 5), v[i] = value_at(i, 6);

  if (attnlab_context_create(&ctx) != ATTNLAB_OK) {
    fprintf(stderr, "C ABI: attnlab_context_create failed: %s\n", attnlab_last_error());
    return 1;
  }
  if (attnlab_options_init(&options) != ATTNLAB_OK || attnlab_forward_args_init(&args) != ATTNLAB_OK) {
    fprintf(stderr, "C ABI: init failed: %s\n", attnlab_last_error());
    attnlab_context_destroy(ctx);
    return 1;
  }
  if (attnlab_abi_version() < ATTNLAB_ABI_VERSION) {
    fprintf(stderr, "C ABI: the library's ABI %d is older than the header's %d\n", (int)attnlab_abi_version(),
            ATTNLAB_ABI_VERSION);
    attnlab_context_destroy(ctx);
    return 1;
  }
  args.q = attnlab_tensor_contiguous(q, ATTNLAB_F32, ATTNLAB_CPU, 4, q_shape);
  args.k = attnlab_tensor_contiguous(k, ATTNLAB_F32, ATTNLAB_CPU, 4, kv_shape);
  args.v = attnlab_tensor_contiguous(v, ATTNLAB_F32, ATTNLAB_CPU, 4, kv_shape);
  args.o = attnlab_tensor_contiguous(o, ATTNLAB_F32, ATTNLAB_CPU, 4, q_shape);
  options.causal = 1;
  options.mask_align = ATTNLAB_BOTTOM_RIGHT;
  options.has_scale = 1;
  options.scale = 0.3f;
  args.options = &options;
  st = attnlab_forward(ctx, &args, path, sizeof path);
  attnlab_context_destroy(ctx);
  if (st != ATTNLAB_OK) {
    fprintf(stderr, "C ABI: attnlab_forward failed (status %d): %s\n", (int)st, attnlab_last_error());
    return 1;
  }

  /* Bottom-right causal: query i sees keys j <= i + S - T. */
  for (n = 0; n < N; ++n)
    for (i = 0; i < T; ++i) {
      double s[S], m = -INFINITY, sum = 0;
      for (j = 0; j <= i + S - T; ++j) {
        double dot = 0;
        for (h = 0; h < H; ++h) dot += (double)q[(i * N + n) * H + h] * (double)k[(j * N + n) * H + h];
        s[j] = 0.3 * dot;
        if (s[j] > m) m = s[j];
      }
      for (j = 0; j <= i + S - T; ++j) sum += exp(s[j] - m);
      for (h = 0; h < H; ++h) {
        double acc = 0;
        for (j = 0; j <= i + S - T; ++j) acc += exp(s[j] - m) / sum * (double)v[(j * N + n) * H + h];
        o_ref[(i * N + n) * H + h] = acc;
      }
    }
  for (i = 0; i < B * T * N * H; ++i) {
    double d = fabs((double)o[i] - o_ref[i]);
    if (!(d <= 1e-4)) bad = 1; /* NaN fails too */
    if (d > err) err = d;
  }
  printf("C ABI:   path %s, max |O - ref| = %.3g: %s\n", path, err, bad ? "MISMATCH" : "ok");
  return bad;
}
