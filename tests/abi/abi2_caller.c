/* A caller of ABI 2, compiled only against attnlab_abi2.h and linked to the current library: its struct sizes are
 * accepted, init writes no byte past its structs, a causal forward with options through the pointer and a workspace
 * it lends (sized by attnlab_forward_workspace_size) matches attention computed here, the bytes past its struct
 * (where ABI 3 has the FP8 scales pointer) are never read, and a struct_size larger than any the library knows is
 * refused. Exit status 0 on success. */
#include "attnlab_abi2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { B = 1, T = 5, N = 2, H = 8 }; /* S = T, K = N */

static float q[B][T][N][H], k[B][T][N][H], v[B][T][N][H], o[B][T][N][H], lse[B][N][T];
/* Lent to the call, from a 256-byte aligned point on (as the ABI asks) of this buffer. */
enum { kWorkspaceBytes = 1 << 16 };
static unsigned char workspace_raw[kWorkspaceBytes + 256];

static float value_at(int i, int salt) { return sinf(0.37f * (float)i + 0.71f * (float)salt) * 0.8f; }

/* A failed check: the message and, when the library has one, its last error. */
static int fail(const char* what) {
  fprintf(stderr, "abi2_caller: %s (last error: %s)\n", what, attnlab_last_error());
  return 1;
}

/* Naive causal (top-left) softmax attention in double; the largest |difference| from o and lse, NaN when either
 * holds a NaN. */
static double max_error(float scale) {
  double err = 0.0;
  int b, n, i, j, h;
  for (b = 0; b < B; ++b)
    for (n = 0; n < N; ++n)
      for (i = 0; i < T; ++i) {
        double s[T], m = -INFINITY, l = 0.0, out[H] = {0}, e;
        for (j = 0; j <= i; ++j) {
          s[j] = 0.0;
          for (h = 0; h < H; ++h) s[j] += (double)q[b][i][n][h] * (double)k[b][j][n][h];
          s[j] *= scale;
          if (s[j] > m) m = s[j];
        }
        for (j = 0; j <= i; ++j) {
          e = exp(s[j] - m);
          l += e;
          for (h = 0; h < H; ++h) out[h] += e * (double)v[b][j][n][h];
        }
        for (h = 0; h < H; ++h) {
          e = fabs(out[h] / l - (double)o[b][i][n][h]);
          if (isnan(e) || e > err) err = e; /* once NaN, stays NaN */
        }
        e = fabs(m + log(l) - (double)lse[b][n][i]);
        if (isnan(e) || e > err) err = e;
      }
  return err;
}

int main(void) {
  const int64_t shape[4] = {B, T, N, H}, lse_shape[3] = {B, N, T};
  const float scale = 0.3f;
  struct {
    attnlab_abi2_forward_args args;
    unsigned char after[64]; /* must stay as set: init and the call write no byte past an ABI 2 struct */
  } guarded;
  struct {
    attnlab_abi2_forward_args args;
    unsigned char added[4096]; /* a "newer" caller's fields: present, so reading them would not be out of bounds */
  } newer;
  attnlab_abi2_options options;
  attnlab_abi2_context* ctx = NULL;
  char ran[32];
  unsigned char o_before[sizeof o];
  size_t workspace_bytes = 0;
  double err;
  int i;

  for (i = 0; i < B * T * N * H; ++i) {
    (&q[0][0][0][0])[i] = value_at(i, 1);
    (&k[0][0][0][0])[i] = value_at(i, 2);
    (&v[0][0][0][0])[i] = value_at(i, 3);
  }
  memset(o, 0xff, sizeof o); /* NaN poison */
  memset(lse, 0xff, sizeof lse);

  if (attnlab_abi_version() < ATTNLAB_ABI2_VERSION) return fail("the library's ABI version is below 2");
  if (attnlab_context_create(&ctx) != ATTNLAB_ABI2_OK) return fail("attnlab_context_create failed");

  memset(&guarded, 0x5a, sizeof guarded);
  if (attnlab_abi2_options_init(&options) != ATTNLAB_ABI2_OK) return fail("attnlab_options_init refused ABI 2");
  if (attnlab_abi2_forward_args_init(&guarded.args) != ATTNLAB_ABI2_OK)
    return fail("attnlab_forward_args_init refused ABI 2");
  for (i = 0; i < (int)sizeof guarded.after; ++i)
    if (guarded.after[i] != 0x5a) return fail("attnlab_forward_args_init wrote past an ABI 2 struct");
  if (guarded.args.struct_size != sizeof guarded.args || options.struct_size != sizeof options)
    return fail("init did not set struct_size to the ABI 2 sizes");
  if (guarded.args.options != NULL || options.causal != 0 || options.window_left != -1 ||
      guarded.args.has_workspace != 0 || guarded.args.workspace != NULL)
    return fail("init did not give the defaults");

  options.causal = 1;
  options.has_scale = 1;
  options.scale = scale;
  options.path = "cpu-naive";
  guarded.args.q = attnlab_tensor_contiguous(q, ATTNLAB_ABI2_F32, ATTNLAB_ABI2_CPU, 4, shape);
  guarded.args.k = attnlab_tensor_contiguous(k, ATTNLAB_ABI2_F32, ATTNLAB_ABI2_CPU, 4, shape);
  guarded.args.v = attnlab_tensor_contiguous(v, ATTNLAB_ABI2_F32, ATTNLAB_ABI2_CPU, 4, shape);
  guarded.args.o = attnlab_tensor_contiguous(o, ATTNLAB_ABI2_F32, ATTNLAB_ABI2_CPU, 4, shape);
  guarded.args.lse = attnlab_tensor_contiguous(lse, ATTNLAB_ABI2_F32, ATTNLAB_ABI2_CPU, 3, lse_shape);
  guarded.args.options = &options;
  if (attnlab_forward_workspace_size(ctx, &guarded.args, &workspace_bytes) != ATTNLAB_ABI2_OK)
    return fail("attnlab_forward_workspace_size refused ABI 2");
  if (workspace_bytes > kWorkspaceBytes) return fail("the workspace this call needs is larger than expected");
  guarded.args.has_workspace = 1;
  guarded.args.workspace = workspace_raw + (256 - (uintptr_t)workspace_raw % 256) % 256;
  guarded.args.workspace_bytes = kWorkspaceBytes;
  /* Past the struct, bytes that today's layout would read as a (wild) FP8 scales pointer. */
  memset(guarded.after, 0x01, sizeof guarded.after);
  if (attnlab_forward(ctx, &guarded.args, ran, sizeof ran) != ATTNLAB_ABI2_OK)
    return fail("an ABI 2 forward was refused");
  for (i = 0; i < (int)sizeof guarded.after; ++i)
    if (guarded.after[i] != 0x01) return fail("attnlab_forward wrote past an ABI 2 struct");
  if (strcmp(ran, "cpu-naive") != 0) return fail("the path of options->path did not run");
  err = max_error(scale);
  printf("abi2_caller: library ABI %d, path %s, max error %g\n", (int)attnlab_abi_version(), ran, err);
  if (!(err <= 1e-5)) return fail("the ABI 2 forward differs from the reference");

  /* A struct_size beyond any layout the library knows: refused, O untouched. */
  memcpy(o_before, o, sizeof o);
  memset(&newer, 0, sizeof newer);
  newer.args = guarded.args;
  newer.args.struct_size = sizeof newer;
  if (attnlab_forward(ctx, &newer.args, NULL, 0) != ATTNLAB_ABI2_INVALID_ARGUMENT)
    return fail("a struct_size larger than the library's was not refused as ATTNLAB_INVALID_ARGUMENT");
  if (strstr(attnlab_last_error(), "attnlab_forward_args.struct_size") == NULL)
    return fail("the refusal does not name attnlab_forward_args.struct_size");
  if (memcmp(o_before, o, sizeof o) != 0) return fail("a refused forward wrote O");
  printf("abi2_caller: struct_size %u refused: %s\n", (unsigned)sizeof newer, attnlab_last_error());

  attnlab_context_destroy(ctx);
  return 0;
}
