/* attnlab C ABI: the same calls as attention.h, for C, ctypes, and any FFI.
 *
 * Plain structs, status codes, and a per-thread last-error message. Pointers are raw host or device pointers;
 * attnlab never owns tensor memory. Initialise option structs with attnlab_options_init() so fields added later
 * get their defaults.
 *
 *   attnlab_context* ctx; attnlab_context_create(&ctx);
 *   attnlab_forward_args a; attnlab_forward_args_init(&a);
 *   a.q = ...; a.k = ...; a.v = ...; a.o = ...;
 *   if (attnlab_forward(ctx, &a, NULL, 0) != ATTNLAB_OK) fprintf(stderr, "%s\n", attnlab_last_error());
 *   attnlab_context_destroy(ctx);
 */
#ifndef ATTNLAB_ATTNLAB_H
#define ATTNLAB_ATTNLAB_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define ATTNLAB_C_API __declspec(dllexport)
#else
#define ATTNLAB_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the values of attnlab::ErrorCode. */
typedef enum attnlab_status {
  ATTNLAB_OK = 0,
  ATTNLAB_INVALID_ARGUMENT = 1,
  ATTNLAB_UNSUPPORTED = 2,
  ATTNLAB_OUT_OF_MEMORY = 3,
  ATTNLAB_DEVICE_ERROR = 4,
  ATTNLAB_INTERNAL = 5
} attnlab_status;

/* Element types: the values of attnlab::DType. */
typedef enum attnlab_dtype {
  ATTNLAB_F32 = 0,
  ATTNLAB_F16 = 1,
  ATTNLAB_BF16 = 2,
  ATTNLAB_E4M3 = 3,
  ATTNLAB_E5M2 = 4,
  ATTNLAB_I32 = 5,
  ATTNLAB_U8 = 6
} attnlab_dtype;

typedef enum attnlab_device { ATTNLAB_CPU = 0, ATTNLAB_CUDA = 1 } attnlab_device;

typedef enum attnlab_mask_align { ATTNLAB_TOP_LEFT = 0, ATTNLAB_BOTTOM_RIGHT = 1 } attnlab_mask_align;

/* A tensor view; rank 0 with data NULL means "absent" for optional arguments. Strides are in elements. */
typedef struct attnlab_tensor {
  void* data;
  int32_t dtype;        /* attnlab_dtype */
  int32_t device;       /* attnlab_device */
  int32_t device_index;
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4];
} attnlab_tensor;

typedef struct attnlab_options {
  int32_t has_scale;    /* 0: scale = 1/sqrt(Hqk) */
  float scale;
  float softcap;        /* 0: off */
  int32_t causal;       /* 0 / 1 */
  int32_t mask_align;   /* attnlab_mask_align */
  int64_t window_left;  /* -1: unbounded */
  int64_t window_right; /* -1: unbounded */
  attnlab_tensor q_seqlens;  /* optional, i32 (B) */
  attnlab_tensor kv_seqlens; /* optional, i32 (B) */
  attnlab_tensor bias;       /* optional, (B|1, N|1, T, S) */
  attnlab_tensor bool_mask;  /* optional, u8 (B|1, N|1, T, S) */
  const char* path;          /* NULL or "auto", or a path name */
} attnlab_options;

typedef struct attnlab_forward_args {
  attnlab_tensor q, k, v, o;
  attnlab_tensor lse; /* optional (B, N, T) f32 */
  attnlab_options options;
} attnlab_forward_args;

typedef struct attnlab_backward_args {
  attnlab_tensor q, k, v, o, d_o, lse;
  attnlab_tensor dq, dk, dv;
  attnlab_options options;
} attnlab_backward_args;

typedef struct attnlab_context attnlab_context;

/* The message of the last failed call on this thread ("" when none). Valid until the thread's next call. */
ATTNLAB_C_API const char* attnlab_last_error(void);
ATTNLAB_C_API const char* attnlab_version(void);

ATTNLAB_C_API attnlab_status attnlab_context_create(attnlab_context** out);
ATTNLAB_C_API void attnlab_context_destroy(attnlab_context* ctx);
ATTNLAB_C_API attnlab_status attnlab_context_set_stream(attnlab_context* ctx, void* cuda_stream);
ATTNLAB_C_API attnlab_status attnlab_context_set_num_threads(attnlab_context* ctx, int32_t threads);

/* A contiguous (row-major) view of `rank` dimensions. */
ATTNLAB_C_API attnlab_tensor attnlab_tensor_contiguous(void* data, int32_t dtype, int32_t device, int32_t rank,
                                                       const int64_t* shape);
ATTNLAB_C_API void attnlab_options_init(attnlab_options* options);
ATTNLAB_C_API void attnlab_forward_args_init(attnlab_forward_args* args);
ATTNLAB_C_API void attnlab_backward_args_init(attnlab_backward_args* args);

/* Runs attention. When path_ran is not NULL, the name of the path that ran is copied there (NUL-terminated,
 * truncated to path_ran_size). On failure nothing is written to the outputs. */
ATTNLAB_C_API attnlab_status attnlab_forward(attnlab_context* ctx, const attnlab_forward_args* args, char* path_ran,
                                             size_t path_ran_size);
ATTNLAB_C_API attnlab_status attnlab_backward(attnlab_context* ctx, const attnlab_backward_args* args,
                                              char* path_ran, size_t path_ran_size);

/* Paths compiled in: count, and each one's name, device and availability (reason when unavailable). */
ATTNLAB_C_API int32_t attnlab_path_count(void);
ATTNLAB_C_API attnlab_status attnlab_path_info(int32_t index, const char** name, int32_t* device, int32_t* available,
                                               const char** unavailable_reason);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNLAB_ATTNLAB_H */
