/* attnlab C ABI: the same calls as attention.h, for C, ctypes, and any FFI.
 *
 * Plain structs, status codes, and a per-thread last-error message. Pointers are raw host or device pointers;
 * attnlab never owns tensor memory.
 *
 *   attnlab_context* ctx; attnlab_context_create(&ctx);
 *   attnlab_options opt; attnlab_options_init(&opt); opt.causal = 1;
 *   attnlab_forward_args a; attnlab_forward_args_init(&a);
 *   a.q = attnlab_tensor_contiguous(q, ATTNLAB_F32, ATTNLAB_CPU, 4, q_shape); a.k = ...; a.v = ...; a.o = ...;
 *   a.options = &opt; (or leave it NULL: every option at its default)
 *   if (attnlab_forward(ctx, &a, NULL, 0) != ATTNLAB_OK) fprintf(stderr, "%s\n", attnlab_last_error());
 *   attnlab_context_destroy(ctx);
 *
 * FP8 (docs/design.md §7; the C++ API is attnlab/fp8.h): attnlab_quantize / attnlab_dequantize, and a
 * TransformerEngine DelayedScaling recipe whose scales and amax histories live in device memory:
 *
 *   attnlab_delayed_scaling* recipe; attnlab_delayed_scaling_create(ctx, NULL, ATTNLAB_CUDA, 0, &recipe);
 *   float *scale, *amax; attnlab_delayed_scaling_tensor(recipe, ATTNLAB_FP8_Q, &scale, NULL, &amax, NULL);
 *   attnlab_quantize(ctx, &q_bf16, &q_fp8, scale, amax);                      likewise k and v
 *   attnlab_fp8_forward_scales fs; attnlab_fp8_forward_scales_init(&fs);
 *   attnlab_delayed_scaling_forward_scales(recipe, &fs); a.fp8 = &fs;
 *   attnlab_forward(ctx, &a, NULL, 0); attnlab_delayed_scaling_update(ctx, recipe, ATTNLAB_FP8_FORWARD);
 *
 * ABI compatibility. A program compiled against one attnlab.h keeps working with every later library:
 *   - The versioned structs (attnlab_options, attnlab_forward_args, attnlab_backward_args, attnlab_fp8_forward_scales,
 *     attnlab_fp8_backward_scales, attnlab_delayed_scaling_recipe, attnlab_paged_kv, attnlab_varlen_forward_args,
 *     attnlab_append_kv_args) begin with struct_size,
 *     which their init function sets to the struct's size as the caller's header declares it. Initialise them
 *     with the init functions, then set fields; never with = {0} or memset alone. From an FFI without the inline
 *     init functions, call attnlab_*_init_sized(&s, sizeof s) with the size of the caller's own declaration.
 *   - Fields are only ever appended, and each new layout comes with a new ATTNLAB_ABI_VERSION. The size of every
 *     released layout stays accepted forever: the library copies the fields the caller has and gives the fields
 *     it does not have their defaults. A struct_size the library does not know (0, a layout newer than the
 *     library, anything else) is refused with ATTNLAB_INVALID_ARGUMENT and a message saying which.
 *   - Versioned structs are passed by pointer, never embedded by value in another struct: a grown struct would
 *     shift every field after it.
 *   - attnlab_tensor is a frozen value type, embedded and returned by value: it carries no size and its layout
 *     never changes. A new kind of tensor would be a new type.
 *   - Enums only gain values. A library refuses a value it does not know, naming the field.
 *
 * Layouts (x86-64 sizes in brackets):
 *   ABI 1  attnlab_options: struct_size .. path [408];
 *          attnlab_forward_args, attnlab_backward_args: struct_size .. options [456, 808].
 *   ABI 2  attnlab_forward_args, attnlab_backward_args: + has_workspace, workspace, workspace_bytes [480, 832].
 *   ABI 3  attnlab_forward_args, attnlab_backward_args: + fp8 [488, 840];
 *          new: attnlab_fp8_forward_scales [72], attnlab_fp8_backward_scales [136],
 *          attnlab_delayed_scaling_recipe [32].
 *   ABI 4  new: attnlab_paged_kv [360], attnlab_varlen_forward_args [680], attnlab_append_kv_args [544] (serving).
 *   ABI 5  attnlab_varlen_forward_args: + sinks [768].
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

/* A tensor view; rank 0 with data NULL means "absent" for optional arguments. Strides are in elements.
 * Frozen: this layout never changes (see "ABI compatibility" above). */
typedef struct attnlab_tensor {
  void* data;
  int32_t dtype;        /* attnlab_dtype */
  int32_t device;       /* attnlab_device */
  int32_t device_index;
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4];
} attnlab_tensor;

/* The ABI of this header: the newest struct layouts it declares. attnlab_abi_version() says the library's; a
 * library serves every caller whose header's ABI version is at most its own. */
#define ATTNLAB_ABI_VERSION 5

/* FP8 scaling of one call (attention.h's Fp8ForwardScales / Fp8BackwardScales): each pointer is one float in the
 * memory of the call's device, read and written by the call's work on the context's stream only. "descale" = 1 /
 * the scale a stored FP8 tensor was quantized with; "scale" multiplies a value before it is rounded to FP8; "amax"
 * receives max |x| before quantization (NULL: not written). Which are required: attention.h. Versioned: initialise
 * with attnlab_fp8_forward_scales_init / attnlab_fp8_backward_scales_init. */
typedef struct attnlab_fp8_forward_scales {
  size_t struct_size; /* set by attnlab_fp8_forward_scales_init */
  const float* descale_q;
  const float* descale_k;
  const float* descale_v;
  const float* scale_s;   /* P is quantized to e4m3 as p · scale_s */
  const float* descale_s; /* 1 / scale_s */
  float* amax_s;
  const float* scale_o;   /* when O is FP8 */
  float* amax_o;
  /* end of ABI 3 */
} attnlab_fp8_forward_scales;

typedef struct attnlab_fp8_backward_scales {
  size_t struct_size; /* set by attnlab_fp8_backward_scales_init */
  const float* descale_q;
  const float* descale_k;
  const float* descale_v;
  const float* descale_o;
  const float* descale_do;
  const float* scale_s;
  const float* descale_s;
  const float* scale_dp;   /* dS is quantized with it */
  const float* descale_dp;
  const float* scale_dq;   /* when dq is FP8; likewise dk, dv */
  const float* scale_dk;
  const float* scale_dv;
  float* amax_dp;
  float* amax_dq;
  float* amax_dk;
  float* amax_dv;
  /* end of ABI 3 */
} attnlab_fp8_backward_scales;

/* Everything of a call that is not one of its tensors. */
typedef struct attnlab_options {
  size_t struct_size;   /* set by attnlab_options_init */
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
  /* end of ABI 1 */
} attnlab_options;

typedef struct attnlab_forward_args {
  size_t struct_size; /* set by attnlab_forward_args_init */
  attnlab_tensor q, k, v, o;
  attnlab_tensor lse;              /* optional (B, N, T) f32 */
  const attnlab_options* options;  /* NULL: every option at its default; read during the call only */
  /* end of ABI 1 */
  /* Device scratch memory lent to this call (given iff has_workspace != 0): 256-byte aligned, on the call's device,
   * untouched by anything else until the call's work on the context's stream has run. GPU paths then take all
   * their scratch from it and allocate no device memory; attnlab_forward_workspace_size says how much they need. */
  int32_t has_workspace;
  void* workspace;
  size_t workspace_bytes;
  /* end of ABI 2 */
  /* Required iff q, k, v are FP8 (NULL: none). Read during the call only; the floats it points at are the device's. */
  const attnlab_fp8_forward_scales* fp8;
  /* end of ABI 3 */
} attnlab_forward_args;

typedef struct attnlab_backward_args {
  size_t struct_size; /* set by attnlab_backward_args_init */
  attnlab_tensor q, k, v, o, d_o, lse;
  attnlab_tensor dq, dk, dv;
  const attnlab_options* options;  /* the forward call's options; NULL: every option at its default */
  /* end of ABI 1 */
  int32_t has_workspace; /* as in attnlab_forward_args */
  void* workspace;
  size_t workspace_bytes;
  /* end of ABI 2 */
  const attnlab_fp8_backward_scales* fp8; /* required iff q, k, v are FP8 (NULL: none) */
  /* end of ABI 3 */
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

/* Fill a struct with the defaults and set its struct_size. struct_size is the caller's sizeof of the struct: only
 * that many bytes are written. A size of no layout this library knows is refused (ATTNLAB_INVALID_ARGUMENT); then
 * only struct_size itself is set (when the size covers it), so that a call made with the struct is refused too. */
ATTNLAB_C_API attnlab_status attnlab_options_init_sized(attnlab_options* options, size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_forward_args_init_sized(attnlab_forward_args* args, size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_backward_args_init_sized(attnlab_backward_args* args, size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_fp8_forward_scales_init_sized(attnlab_fp8_forward_scales* scales,
                                                                   size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_fp8_backward_scales_init_sized(attnlab_fp8_backward_scales* scales,
                                                                    size_t struct_size);

/* The init functions: inline, so that struct_size is the size this header declares. */
static inline attnlab_status attnlab_options_init(attnlab_options* options) {
  return attnlab_options_init_sized(options, sizeof *options);
}
static inline attnlab_status attnlab_forward_args_init(attnlab_forward_args* args) {
  return attnlab_forward_args_init_sized(args, sizeof *args);
}
static inline attnlab_status attnlab_backward_args_init(attnlab_backward_args* args) {
  return attnlab_backward_args_init_sized(args, sizeof *args);
}
static inline attnlab_status attnlab_fp8_forward_scales_init(attnlab_fp8_forward_scales* scales) {
  return attnlab_fp8_forward_scales_init_sized(scales, sizeof *scales);
}
static inline attnlab_status attnlab_fp8_backward_scales_init(attnlab_fp8_backward_scales* scales) {
  return attnlab_fp8_backward_scales_init_sized(scales, sizeof *scales);
}

/* The library's ABI version (ATTNLAB_ABI_VERSION as the library was built). */
ATTNLAB_C_API int32_t attnlab_abi_version(void);

/* Runs attention. When path_ran is not NULL, the name of the path that ran is copied there (NUL-terminated,
 * truncated to path_ran_size). On failure nothing is written to the outputs. */
ATTNLAB_C_API attnlab_status attnlab_forward(attnlab_context* ctx, const attnlab_forward_args* args, char* path_ran,
                                             size_t path_ran_size);
ATTNLAB_C_API attnlab_status attnlab_backward(attnlab_context* ctx, const attnlab_backward_args* args,
                                              char* path_ran, size_t path_ran_size);

/* The scratch bytes the call would need in a caller workspace (has_workspace): of the path the call would run,
 * "auto" resolved as the call resolves it, the args' own workspace ignored. Nothing is launched. *bytes is written
 * only on success. */
ATTNLAB_C_API attnlab_status attnlab_forward_workspace_size(attnlab_context* ctx, const attnlab_forward_args* args,
                                                            size_t* bytes);
ATTNLAB_C_API attnlab_status attnlab_backward_workspace_size(attnlab_context* ctx, const attnlab_backward_args* args,
                                                             size_t* bytes);

/* ---------------------------------------------------------------------------------------------------------------
 * FP8 (ABI 3)
 * ------------------------------------------------------------------------------------------------------------- */
/* out = fp8(in · *scale), round to nearest even, saturated to the format's largest finite value (NaN stays NaN);
 * *amax = max |in| (NaN when in holds one) when amax is not NULL. in: f32, f16 or bf16; out: e4m3 or e5m2 of the
 * same shape on the same device; rank 1..4, strides ≥ 0, last dimension contiguous. scale and amax are one float in
 * that device's memory. On the GPU: one kernel on the context's stream, no allocation, no host wait. */
ATTNLAB_C_API attnlab_status attnlab_quantize(attnlab_context* ctx, const attnlab_tensor* in, const attnlab_tensor* out,
                                              const float* scale, float* amax);
/* out = float(in) · *scale_inv, rounded to out's dtype (f32, f16 or bf16). */
ATTNLAB_C_API attnlab_status attnlab_dequantize(attnlab_context* ctx, const attnlab_tensor* in,
                                                const attnlab_tensor* out, const float* scale_inv);

/* The values of attnlab::Fp8RecipeFormat, AmaxAlgorithm, Fp8Tensor and Fp8Pass. */
typedef enum attnlab_fp8_recipe_format {
  ATTNLAB_FP8_FORMAT_E4M3 = 0,  /* every tensor in e4m3 */
  ATTNLAB_FP8_FORMAT_HYBRID = 1 /* e4m3 forward, e5m2 for the gradients */
} attnlab_fp8_recipe_format;
typedef enum attnlab_amax_algorithm { ATTNLAB_AMAX_MAX = 0, ATTNLAB_AMAX_MOST_RECENT = 1 } attnlab_amax_algorithm;
typedef enum attnlab_fp8_tensor {
  ATTNLAB_FP8_Q = 0,
  ATTNLAB_FP8_K = 1,
  ATTNLAB_FP8_V = 2,
  ATTNLAB_FP8_S = 3, /* the softmax matrix P */
  ATTNLAB_FP8_O = 4,
  ATTNLAB_FP8_DO = 5,
  ATTNLAB_FP8_DP = 6, /* the scores' gradient dS */
  ATTNLAB_FP8_DQ = 7,
  ATTNLAB_FP8_DK = 8,
  ATTNLAB_FP8_DV = 9
} attnlab_fp8_tensor;
#define ATTNLAB_FP8_TENSOR_COUNT 10
typedef enum attnlab_fp8_pass { ATTNLAB_FP8_FORWARD = 0, ATTNLAB_FP8_BACKWARD = 1 } attnlab_fp8_pass;

/* TransformerEngine's DelayedScaling recipe (attnlab::DelayedScalingRecipe). Versioned: initialise with
 * attnlab_delayed_scaling_recipe_init (margin 0, HYBRID, history 1024, "max"). */
typedef struct attnlab_delayed_scaling_recipe {
  size_t struct_size;        /* set by attnlab_delayed_scaling_recipe_init */
  int32_t margin;            /* 0..32 */
  int32_t format;            /* attnlab_fp8_recipe_format */
  int64_t amax_history_len;  /* 1 .. 2^24 */
  int32_t amax_compute_algo; /* attnlab_amax_algorithm */
  /* end of ABI 3 */
} attnlab_delayed_scaling_recipe;

ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_recipe_init_sized(attnlab_delayed_scaling_recipe* recipe,
                                                                       size_t struct_size);
static inline attnlab_status attnlab_delayed_scaling_recipe_init(attnlab_delayed_scaling_recipe* recipe) {
  return attnlab_delayed_scaling_recipe_init_sized(recipe, sizeof *recipe);
}

/* The state of one attention layer's recipe (attnlab::DelayedScaling): scale, scale_inv and amax history of each
 * attnlab_fp8_tensor, in device memory (ATTNLAB_CUDA: one allocation, initialised on the context's stream) or host
 * memory (ATTNLAB_CPU). recipe NULL: the defaults. */
typedef struct attnlab_delayed_scaling attnlab_delayed_scaling;
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_create(attnlab_context* ctx,
                                                            const attnlab_delayed_scaling_recipe* recipe,
                                                            int32_t device, int32_t device_index,
                                                            attnlab_delayed_scaling** out);
/* Frees the state; the work on the stream that uses it must have finished. NULL is a no-op. */
ATTNLAB_C_API void attnlab_delayed_scaling_destroy(attnlab_delayed_scaling* recipe);
/* One recipe step of the pass's five tensors from the amax each wrote this step (attnlab/fp8.h says how): one kernel
 * on the context's stream, nothing allocated or waited for. */
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_update(attnlab_context* ctx, attnlab_delayed_scaling* recipe,
                                                            int32_t pass);
/* One tensor's pointers into the state (each output may be NULL): scale, scale_inv, and amax, the staging slot that
 * quantize and attention calls write and update consumes; dtype: the attnlab_dtype the recipe quantizes it to. */
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_tensor(const attnlab_delayed_scaling* recipe, int32_t tensor,
                                                            float** scale, float** scale_inv, float** amax,
                                                            int32_t* dtype);
/* The scales of a forward / backward call, written into the caller's initialised struct (its struct_size's fields).
 * In training, update the forward pass after the backward call, which reads the forward tensors' descales. */
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_forward_scales(const attnlab_delayed_scaling* recipe,
                                                                    attnlab_fp8_forward_scales* out);
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_backward_scales(const attnlab_delayed_scaling* recipe,
                                                                     attnlab_fp8_backward_scales* out);
/* A host copy of one tensor's state once the context's stream has run what was enqueued (ATTNLAB_CUDA: a copy on the
 * stream, then a wait for that stream). Each output may be NULL. amax_history receives amax_history_len floats in
 * time order, oldest first: the last L − 1 updates' amaxes, then the staging slot (0 right after an update); its
 * capacity history_capacity must be at least the recipe's amax_history_len. */
ATTNLAB_C_API attnlab_status attnlab_delayed_scaling_read(attnlab_context* ctx, const attnlab_delayed_scaling* recipe,
                                                          int32_t tensor, float* scale, float* scale_inv,
                                                          float* amax_history, size_t history_capacity);

/* ---------------------------------------------------------------------------------------------------------------
 * Serving (ABI 4): packed variable-length batches, paged KV caches, appends (attnlab/serving.h and docs/serving.md
 * have the semantics; the fields mirror the C++ structs). Versioned: initialise with the init functions.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct attnlab_paged_kv {
  size_t struct_size;          /* set by attnlab_paged_kv_init */
  attnlab_tensor k_cache;      /* (pages, page_size, K, Hqk) */
  attnlab_tensor v_cache;      /* (pages, page_size, K, Hv) */
  attnlab_tensor block_table;  /* (B, pages per sequence) i32 */
  attnlab_tensor seqlens;      /* (B) i32: keys of each sequence in the cache */
  /* end of ABI 4 */
} attnlab_paged_kv;

typedef struct attnlab_varlen_forward_args {
  size_t struct_size;          /* set by attnlab_varlen_forward_args_init */
  attnlab_tensor q;            /* (total_q, N, Hqk) */
  attnlab_tensor cu_seqlens_q; /* (B + 1) i32 */
  int64_t max_seqlen_q;
  attnlab_tensor k, v;         /* packed keys (total_k, K, H), or absent with paged */
  attnlab_tensor cu_seqlens_k; /* (B + 1) i32, or absent with paged */
  int64_t max_seqlen_k;
  const attnlab_paged_kv* paged; /* NULL: packed keys; read during the call only */
  attnlab_tensor o;            /* (total_q, N, Hv) */
  attnlab_tensor lse;          /* optional (N, total_q) f32 */
  const attnlab_options* options; /* NULL: the defaults; seqlens, bias and bool_mask must be absent */
  int32_t has_workspace;       /* as in attnlab_forward_args */
  void* workspace;
  size_t workspace_bytes;
  /* end of ABI 4 */
  attnlab_tensor sinks;        /* optional (N) f32: attention sinks, one logit per query head (attnlab/serving.h) */
  /* end of ABI 5 */
} attnlab_varlen_forward_args;

typedef struct attnlab_append_kv_args {
  size_t struct_size;            /* set by attnlab_append_kv_args_init */
  attnlab_tensor k_new, v_new;   /* (B, T_new, K, H), or packed (total_new, K, H) with cu_seqlens_new */
  attnlab_tensor cu_seqlens_new; /* optional (B + 1) i32 */
  attnlab_tensor k_cache, v_cache; /* contiguous (B, S_max, K, H), or absent with paged */
  attnlab_tensor seqlens;        /* (B) i32, or absent with paged */
  const attnlab_paged_kv* paged; /* NULL: the contiguous cache above */
  /* end of ABI 4 */
} attnlab_append_kv_args;

ATTNLAB_C_API attnlab_status attnlab_paged_kv_init_sized(attnlab_paged_kv* cache, size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_varlen_forward_args_init_sized(attnlab_varlen_forward_args* args,
                                                                    size_t struct_size);
ATTNLAB_C_API attnlab_status attnlab_append_kv_args_init_sized(attnlab_append_kv_args* args, size_t struct_size);
static inline attnlab_status attnlab_paged_kv_init(attnlab_paged_kv* cache) {
  return attnlab_paged_kv_init_sized(cache, sizeof *cache);
}
static inline attnlab_status attnlab_varlen_forward_args_init(attnlab_varlen_forward_args* args) {
  return attnlab_varlen_forward_args_init_sized(args, sizeof *args);
}
static inline attnlab_status attnlab_append_kv_args_init(attnlab_append_kv_args* args) {
  return attnlab_append_kv_args_init_sized(args, sizeof *args);
}

/* Attention over a packed or paged batch (attnlab::forward(ctx, VarlenForwardArgs)); path_ran as attnlab_forward. */
ATTNLAB_C_API attnlab_status attnlab_varlen_forward(attnlab_context* ctx, const attnlab_varlen_forward_args* args,
                                                    char* path_ran, size_t path_ran_size);
/* New rows into a cache at each sequence's end (attnlab::append_kv); the caller advances the lengths. */
ATTNLAB_C_API attnlab_status attnlab_append_kv(attnlab_context* ctx, const attnlab_append_kv_args* args);

/* Paths compiled in: count, and each one's name, device and availability (reason when unavailable). */
ATTNLAB_C_API int32_t attnlab_path_count(void);
ATTNLAB_C_API attnlab_status attnlab_path_info(int32_t index, const char** name, int32_t* device, int32_t* available,
                                               const char** unavailable_reason);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNLAB_ATTNLAB_H */
