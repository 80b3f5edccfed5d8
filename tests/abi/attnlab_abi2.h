/* The C ABI as a caller compiled against ABI 2 of attnlab.h (libattnlab 0.2) has it: frozen, never to be edited.
 *
 * Types and constants carry an abi2 prefix so that nothing here can be mistaken for today's attnlab.h; the entry
 * points are the library's own symbols, declared with these ABI 2 types. A program including only this header and
 * linked to a current libattnlab shows that the library still accepts the ABI 2 layouts. */
#ifndef ATTNLAB_ABI2_H
#define ATTNLAB_ABI2_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNLAB_ABI2_VERSION 2

typedef enum attnlab_abi2_status {
  ATTNLAB_ABI2_OK = 0,
  ATTNLAB_ABI2_INVALID_ARGUMENT = 1,
  ATTNLAB_ABI2_UNSUPPORTED = 2,
  ATTNLAB_ABI2_OUT_OF_MEMORY = 3,
  ATTNLAB_ABI2_DEVICE_ERROR = 4,
  ATTNLAB_ABI2_INTERNAL = 5
} attnlab_abi2_status;

typedef enum attnlab_abi2_dtype {
  ATTNLAB_ABI2_F32 = 0,
  ATTNLAB_ABI2_F16 = 1,
  ATTNLAB_ABI2_BF16 = 2,
  ATTNLAB_ABI2_E4M3 = 3,
  ATTNLAB_ABI2_E5M2 = 4,
  ATTNLAB_ABI2_I32 = 5,
  ATTNLAB_ABI2_U8 = 6
} attnlab_abi2_dtype;

typedef enum attnlab_abi2_device { ATTNLAB_ABI2_CPU = 0, ATTNLAB_ABI2_CUDA = 1 } attnlab_abi2_device;

typedef enum attnlab_abi2_mask_align {
  ATTNLAB_ABI2_TOP_LEFT = 0,
  ATTNLAB_ABI2_BOTTOM_RIGHT = 1
} attnlab_abi2_mask_align;

typedef struct attnlab_abi2_tensor {
  void* data;
  int32_t dtype;
  int32_t device;
  int32_t device_index;
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4];
} attnlab_abi2_tensor;

typedef struct attnlab_abi2_options {
  size_t struct_size;
  int32_t has_scale;
  float scale;
  float softcap;
  int32_t causal;
  int32_t mask_align;
  int64_t window_left;
  int64_t window_right;
  attnlab_abi2_tensor q_seqlens;
  attnlab_abi2_tensor kv_seqlens;
  attnlab_abi2_tensor bias;
  attnlab_abi2_tensor bool_mask;
  const char* path;
} attnlab_abi2_options;

typedef struct attnlab_abi2_forward_args {
  size_t struct_size;
  attnlab_abi2_tensor q, k, v, o;
  attnlab_abi2_tensor lse;
  const attnlab_abi2_options* options;
  int32_t has_workspace;
  void* workspace;
  size_t workspace_bytes;
} attnlab_abi2_forward_args;

typedef struct attnlab_abi2_backward_args {
  size_t struct_size;
  attnlab_abi2_tensor q, k, v, o, d_o, lse;
  attnlab_abi2_tensor dq, dk, dv;
  const attnlab_abi2_options* options;
  int32_t has_workspace;
  void* workspace;
  size_t workspace_bytes;
} attnlab_abi2_backward_args;

typedef struct attnlab_abi2_context attnlab_abi2_context;

const char* attnlab_last_error(void);
int32_t attnlab_abi_version(void);
attnlab_abi2_status attnlab_context_create(attnlab_abi2_context** out);
void attnlab_context_destroy(attnlab_abi2_context* ctx);
attnlab_abi2_tensor attnlab_tensor_contiguous(void* data, int32_t dtype, int32_t device, int32_t rank,
                                              const int64_t* shape);
attnlab_abi2_status attnlab_options_init_sized(attnlab_abi2_options* options, size_t struct_size);
attnlab_abi2_status attnlab_forward_args_init_sized(attnlab_abi2_forward_args* args, size_t struct_size);
attnlab_abi2_status attnlab_backward_args_init_sized(attnlab_abi2_backward_args* args, size_t struct_size);
attnlab_abi2_status attnlab_forward(attnlab_abi2_context* ctx, const attnlab_abi2_forward_args* args,
                                    char* path_ran, size_t path_ran_size);
attnlab_abi2_status attnlab_backward(attnlab_abi2_context* ctx, const attnlab_abi2_backward_args* args,
                                     char* path_ran, size_t path_ran_size);
attnlab_abi2_status attnlab_forward_workspace_size(attnlab_abi2_context* ctx, const attnlab_abi2_forward_args* args,
                                                   size_t* bytes);

static inline attnlab_abi2_status attnlab_abi2_options_init(attnlab_abi2_options* options) {
  return attnlab_options_init_sized(options, sizeof *options);
}
static inline attnlab_abi2_status attnlab_abi2_forward_args_init(attnlab_abi2_forward_args* args) {
  return attnlab_forward_args_init_sized(args, sizeof *args);
}
static inline attnlab_abi2_status attnlab_abi2_backward_args_init(attnlab_abi2_backward_args* args) {
  return attnlab_backward_args_init_sized(args, sizeof *args);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNLAB_ABI2_H */
