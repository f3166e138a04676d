/* hattn -- FlashAttention-3-style attention for NVIDIA Hopper (sm_90a). Public C API.
 *
 * Tensors use the layout [batch, seqlen, heads, head_dim] with arbitrary batch / seq / head
 * strides (in elements) and a contiguous head_dim. Every entry point validates its input
 * before launching anything: on a non-success status nothing is launched and nothing is
 * written. Thread-safe: the only state the library keeps is write-once, per process: the
 * driver's tensor-map entry point, and per (kernel, device) that the kernel's shared-memory
 * attribute is set and its occupancy (atomics; a cudaDeviceReset is noticed and the attribute
 * set again).
 */
#ifndef HATTN_H_
#define HATTN_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/* The version of this header. CMake reads it from here (project version, soname, package
 * version); hattn_version() returns the version of the library actually loaded. */
#define HATTN_VERSION_MAJOR 0
#define HATTN_VERSION_MINOR 1
#define HATTN_VERSION_PATCH 0
#define HATTN_VERSION (HATTN_VERSION_MAJOR * 10000 + HATTN_VERSION_MINOR * 100 + HATTN_VERSION_PATCH)

/* The functions libhattn.so exports; everything else in it is hidden. */
#ifndef HATTN_API
#if defined(__GNUC__) || defined(__clang__)
#define HATTN_API __attribute__((visibility("default")))
#else
#define HATTN_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hattn_status {
    HATTN_SUCCESS = 0,
    HATTN_ERROR_NULL_PARAMS,           /* the params pointer itself is NULL */
    HATTN_ERROR_NULL_POINTER,          /* a required tensor pointer (q, k, v, o; backward: dout, lse, dq, dk, dv) is NULL */
    HATTN_ERROR_MISALIGNED,            /* a base pointer or stride breaks TMA's 16-byte rule */
    HATTN_ERROR_UNSUPPORTED_HEAD_DIM,  /* head_dim not in {64, 128, 256} */
    HATTN_ERROR_UNSUPPORTED_DTYPE,     /* dtype not bf16 / fp16 */
    HATTN_ERROR_INVALID_SIZE,          /* a non-positive batch, heads or seqlen */
    HATTN_ERROR_INVALID_STRIDE,        /* a non-positive or overlapping stride */
    HATTN_ERROR_HEADS_NOT_DIVISIBLE,   /* heads_q is not a multiple of heads_kv (GQA/MQA) */
    HATTN_ERROR_SIZE_OVERFLOW,         /* a size or offset exceeds what TMA or int32 indexing holds */
    HATTN_ERROR_INVALID_SCALE,         /* softmax_scale is negative, NaN or infinite */
    HATTN_ERROR_INVALID_FLAGS,         /* unknown flag bits, or a variant not built for this shape */
    HATTN_ERROR_UNSUPPORTED_DEVICE,    /* the current device is not compute capability 9.0 */
    HATTN_ERROR_CUDA,                  /* a CUDA runtime/driver call failed */
    HATTN_ERROR_WORKSPACE              /* a workspace is NULL where required, misaligned or too small */
} hattn_status;

typedef enum hattn_dtype {
    HATTN_DTYPE_BF16 = 0,
    HATTN_DTYPE_FP16 = 1
} hattn_dtype;

/* Variant flags (for ablation studies; 0 = the fastest schedule). */
enum {
    HATTN_FWD_NO_PINGPONG = 1u << 0,       /* consumer warpgroups do not take turns on the tensor cores */
    HATTN_FWD_NO_INTRA_WG_OVERLAP = 1u << 1 /* no 2-stage GEMM/softmax pipelining inside a warpgroup */
};

typedef struct hattn_fwd_params {
    const void* q;   /* [batch, seqlen_q, heads_q,  head_dim] */
    const void* k;   /* [batch, seqlen_k, heads_kv, head_dim] */
    const void* v;   /* [batch, seqlen_k, heads_kv, head_dim] */
    void* o;         /* [batch, seqlen_q, heads_q,  head_dim], same dtype as q */
    float* lse;      /* optional (NULL to skip): [batch, heads_q, seqlen_q] fp32, natural log */

    int batch;
    int heads_q;
    int heads_kv;    /* heads_q % heads_kv == 0 (1 = MQA, heads_q = MHA) */
    int seqlen_q;
    int seqlen_k;
    int head_dim;    /* 64, 128 or 256 */

    /* Strides in elements. head_dim is contiguous (stride 1). */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;

    hattn_dtype dtype;
    float softmax_scale; /* 0 selects the default 1/sqrt(head_dim) */
    int causal;          /* non-zero: key j is visible to query i iff j <= i + seqlen_k - seqlen_q (bottom-right) */
    unsigned flags;      /* HATTN_FWD_* variant bits, 0 by default */

    /* Optional (NULL: none): hattn_fwd_workspace_size() bytes of device memory, 16-byte aligned,
     * zero-filled once before its first use (cudaMemset; only its first
     * HATTN_FWD_WORKSPACE_STATE_BYTES must be zero, and every call leaves them zero again; the rest
     * is scratch). With it, causal problems run on one thread block per SM that take their tiles
     * from a counter in the workspace, longest first, from 1k keys on (d64: over 256; faster:
     * bench/RESULTS.md runs 46, 50, 51); without it they keep a fixed tile order. So do problems
     * without a mask whose last query tile is partial, at d64 (seqlen_q not a multiple of 192) and
     * d256 (of 128), up to 8192 keys: those tiles then fill the grid's last pass (d64 +2-8%, run
     * 55d). Other d128 problems without a mask, whose seqlen_q is a multiple of 128, run on one
     * thread block per SM and split the tiles left over for a partly empty last pass over their
     * keys where each block's share is at least 16 KV blocks, merging the partial results
     * through the workspace (+1-3% at 4k-8k keys, run 56). A split tile's merged O may differ
     * from a whole tile's in the last bits; either is the same from run to run. Thread blocks
     * only ever wait for blocks launched before them, so a GPU shared with other work (MPS, a
     * green context) that runs a few of them at a time still finishes. Two calls in
     * flight at once (on different streams) need separate workspaces (not checked).
     * workspace_size is its size in bytes. */
    void* workspace;
    size_t workspace_size;
} hattn_fwd_params;

/* Bytes of the forwards' optional scheduler workspace (hattn_fwd_params.workspace,
 * hattn_fwd_fp8_params.schedule_workspace): 19.5 MB, most of it scratch for partial results;
 * call it rather than hard-coding the value, which may change in a later version. */
HATTN_API size_t hattn_fwd_workspace_size(void);
/* The workspace's leading bytes that must be zero before a call (and are left zero by it). */
#define HATTN_FWD_WORKSPACE_STATE_BYTES 4096

/* Fill params for contiguous [b, s, h, d] tensors (strides derived from the sizes), the
 * default scale, no causal mask and no LSE. Returns params with everything else zeroed. */
HATTN_API hattn_fwd_params hattn_fwd_params_contiguous(const void* q, const void* k, const void* v, void* o,
                                                       int batch, int heads_q, int heads_kv, int seqlen_q,
                                                       int seqlen_k, int head_dim, hattn_dtype dtype);

/* Check params without launching. On failure, writes a message naming the bad argument to
 * msg (if msg != NULL and msg_len > 0, always NUL-terminated). Touches no device state. */
HATTN_API hattn_status hattn_fwd_validate(const hattn_fwd_params* params, char* msg, size_t msg_len);

/* Forward attention on `stream`: O = softmax(scale * Q K^T + mask) V, and LSE if requested.
 * Validates first (same checks and order as hattn_fwd_validate) and returns before any CUDA call
 * on failure; then requires the current device to be CC 9.0. O must not overlap q, k, v or lse
 * (not checked). A query row that sees no key (causal with seqlen_q > seqlen_k) gets O = 0 and
 * LSE = -inf. On HATTN_ERROR_CUDA, set the environment variable HATTN_LOG_ERRORS=1 to have the
 * launcher's message printed to stderr.
 *
 * Non-finite inputs. Tensor contents are not checked. Row (b, i, h) of O and LSE[b, h, i] depend
 * only on q[b, i, h, :] and on the keys and values of KV head g = h / (heads_q / heads_kv) that
 * the row sees; every element that does not depend on a NaN or infinity is bit-identical to what
 * the same call gives with that element finite. With one non-finite element, in a row that sees
 * at least one key (a row that sees none keeps O = 0, LSE = -inf):
 *   (a) NaN in q[b, i, h, c]: O[b, i, h, :] is all NaN and LSE[b, h, i] is NaN.
 *   (b) NaN in k[b, j, g, c]: every row of a query head of group g (batch b) that sees key j
 *       gets all-NaN O and NaN LSE.
 *   (c) NaN in v[b, j, g, c]: column c of O is NaN in every row of group g that sees key j; its
 *       other columns and LSE are unaffected. Rows of group g that do not see key j may also
 *       get NaN in column c (keys are multiplied in blocks, and a masked key's zero weight
 *       times NaN is NaN); their other columns and LSE are unaffected.
 *   (d) +-Inf in q or k: each score with that element becomes +-Inf (NaN for Inf * 0). A row
 *       with a +Inf or NaN score becomes all NaN (O and LSE). A -Inf score drops its key as the
 *       mask does: the row equals the result without that key, and a row whose every score is
 *       -Inf is a row that sees no key (O = 0, LSE = -inf).
 *   (e) +-Inf in v[b, j, g, c]: column c of O is +-Inf or NaN in the rows of group g that see
 *       key j (and may be NaN in the other rows of group g); other columns and LSE are
 *       unaffected. */
HATTN_API hattn_status hattn_fwd(const hattn_fwd_params* params, cudaStream_t stream);

/* ---- Backward ---------------------------------------------------------------------------- */

/* Backward variant flags (0 = the fastest schedule). */
enum {
    HATTN_BWD_DETERMINISTIC = 1u << 0  /* dQ is reduced across KV blocks in a fixed order:
                                          bit-identical results from run to run (dK and dV are
                                          always reduced in a fixed order) */
};

typedef struct hattn_bwd_params {
    const void* q;     /* [batch, seqlen_q, heads_q,  head_dim] */
    const void* k;     /* [batch, seqlen_k, heads_kv, head_dim] */
    const void* v;     /* [batch, seqlen_k, heads_kv, head_dim] */
    const void* o;     /* [batch, seqlen_q, heads_q,  head_dim]: the forward's output */
    const void* dout;  /* [batch, seqlen_q, heads_q,  head_dim]: dL/dO */
    const float* lse;  /* [batch, heads_q, seqlen_q] fp32, natural log: the forward's LSE */
    void* dq;          /* [batch, seqlen_q, heads_q,  head_dim] */
    void* dk;          /* [batch, seqlen_k, heads_kv, head_dim]: summed over each GQA group */
    void* dv;          /* [batch, seqlen_k, heads_kv, head_dim]: summed over each GQA group */
    void* workspace;   /* >= hattn_bwd_workspace_size(...) bytes of device memory, 256-byte aligned;
                          contents need not be initialized and are overwritten */
    size_t workspace_size;

    int batch;
    int heads_q;
    int heads_kv;
    int seqlen_q;
    int seqlen_k;
    int head_dim;      /* 64, 128 or 256 */

    /* Strides in elements. head_dim is contiguous (stride 1). */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;
    int64_t do_batch_stride, do_seq_stride, do_head_stride;
    int64_t dq_batch_stride, dq_seq_stride, dq_head_stride;
    int64_t dk_batch_stride, dk_seq_stride, dk_head_stride;
    int64_t dv_batch_stride, dv_seq_stride, dv_head_stride;

    hattn_dtype dtype;   /* of q, k, v, o, dout, dq, dk, dv */
    float softmax_scale; /* 0 selects the default 1/sqrt(head_dim); must equal the forward's */
    int causal;          /* as in the forward */
    unsigned flags;      /* HATTN_BWD_* bits */
} hattn_bwd_params;

/* Bytes of device workspace hattn_bwd needs for these sizes (0 if a size is non-positive or the
 * total overflows). */
HATTN_API size_t hattn_bwd_workspace_size(int batch, int heads_q, int seqlen_q, int head_dim);

/* Fill params for contiguous [b, s, h, d] tensors, the default scale, no mask, no flags, and no
 * workspace (set workspace / workspace_size before calling hattn_bwd). */
HATTN_API hattn_bwd_params hattn_bwd_params_contiguous(const void* q, const void* k, const void* v,
                                                       const void* o, const void* dout, const float* lse,
                                                       void* dq, void* dk, void* dv, int batch, int heads_q,
                                                       int heads_kv, int seqlen_q, int seqlen_k, int head_dim,
                                                       hattn_dtype dtype);

/* Check params without launching (as hattn_fwd_validate). */
HATTN_API hattn_status hattn_bwd_validate(const hattn_bwd_params* params, char* msg, size_t msg_len);

/* Backward attention on `stream`: dQ, dK, dV of L given dO = dL/dO, for the forward that produced
 * O and LSE from the same q, k, v, scale and mask. Validates first (as hattn_fwd, over all eight
 * tensors; then the scale, the flags and, last, the workspace) and returns before any CUDA call
 * on failure; then requires the current device to be CC 9.0. dq, dk, dv and the workspace must
 * not overlap each other or the inputs (not checked). Query rows that see no key get dQ = 0; keys
 * no query sees get dK = dV = 0. On HATTN_ERROR_CUDA, HATTN_LOG_ERRORS=1 prints the launcher's
 * message to stderr. */
HATTN_API hattn_status hattn_bwd(const hattn_bwd_params* params, cudaStream_t stream);

/* ---- FP8 pre-pass ------------------------------------------------------------------------ */

/* Rotary embedding conventions of hattn_fp8_prepass. For pair index i in [0, head_dim / 2) and a
 * row at table position p, the pair (a, b) becomes (a cos - b sin, a sin + b cos) with
 * cos = rope_cos[p * head_dim / 2 + i], sin likewise. */
typedef enum hattn_rope {
    HATTN_ROPE_NONE = 0,         /* no rotation */
    HATTN_ROPE_INTERLEAVED = 1,  /* GPT-J: pairs (2i, 2i + 1) */
    HATTN_ROPE_HALF = 2          /* GPT-NeoX: pairs (i, i + head_dim / 2) */
} hattn_rope;

/* Rows per quantization block: one fp32 descale per (batch, head, block of this many rows), the
 * query and key tiles of the FP8 attention kernel. */
#define HATTN_FP8_BLOCK_ROWS 128

/* The largest finite e4m3 value: descale = amax / HATTN_FP8_E4M3_MAX. */
#define HATTN_FP8_E4M3_MAX 448.0f

typedef struct hattn_fp8_prepass_params {
    const void* q;     /* [batch, seqlen_q, heads_q,  head_dim], bf16 or fp16 */
    const void* k;     /* [batch, seqlen_k, heads_kv, head_dim] */
    const void* v;     /* [batch, seqlen_k, heads_kv, head_dim] */
    void* q_fp8;       /* [batch, seqlen_q, heads_q,  head_dim] e4m3 (one byte per element) */
    void* k_fp8;       /* [batch, seqlen_k, heads_kv, head_dim] e4m3 */
    void* v_fp8;       /* [batch, seqlen_k, heads_kv, head_dim] e4m3 */
    float* q_descale;  /* [batch, heads_q,  ceil(seqlen_q / HATTN_FP8_BLOCK_ROWS)] fp32 */
    float* k_descale;  /* [batch, heads_kv, ceil(seqlen_k / HATTN_FP8_BLOCK_ROWS)] fp32 */
    float* v_descale;  /* [batch, heads_kv, ceil(seqlen_k / HATTN_FP8_BLOCK_ROWS)] fp32 */

    /* Rotary tables (only with rope != HATTN_ROPE_NONE): [rope_rows, head_dim / 2] fp32,
     * contiguous, 16-byte aligned. Key row j uses table row j; query row i uses table row
     * i + rope_q_offset (for a query block that ends where the keys end, as with hattn's
     * bottom-right causal mask: rope_q_offset = seqlen_k - seqlen_q). */
    const float* rope_cos;
    const float* rope_sin;
    int rope_rows;      /* >= seqlen_k and >= rope_q_offset + seqlen_q */
    int rope_q_offset;  /* >= 0 */

    int batch;
    int heads_q;
    int heads_kv;    /* heads_q % heads_kv == 0 */
    int seqlen_q;
    int seqlen_k;
    int head_dim;    /* 64, 128 or 256 */

    /* Strides in elements (the e4m3 outputs' are bytes); head_dim is contiguous. */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t q_fp8_batch_stride, q_fp8_seq_stride, q_fp8_head_stride;
    int64_t k_fp8_batch_stride, k_fp8_seq_stride, k_fp8_head_stride;
    int64_t v_fp8_batch_stride, v_fp8_seq_stride, v_fp8_head_stride;

    hattn_dtype dtype;       /* of q, k, v */
    hattn_rope rope;         /* applied to q and k only */
    int hadamard;            /* non-zero: q and k are multiplied by M = D H / sqrt(head_dim) */
    uint64_t hadamard_seed;  /* D's signs: see hattn_fp8_prepass below */
    unsigned flags;          /* 0 or HATTN_FP8_PREPASS_V_TRANSPOSED | HATTN_FP8_PREPASS_V_PER_HEAD */
} hattn_fp8_prepass_params;

/* hattn_fp8_prepass_params.flags: write v_fp8 as V^T in the layout hattn_fwd_fp8 reads with
 * HATTN_FWD_FP8_V_TRANSPOSED (see there), so the FP8 forward needs no transpose of its own and
 * no workspace. v_fp8 must then hold hattn_fwd_fp8_workspace_size(batch, heads_kv, seqlen_k,
 * head_dim) bytes, 16-byte aligned; its strides are ignored. */
enum { HATTN_FP8_PREPASS_V_TRANSPOSED = 1u << 0 };
/* hattn_fp8_prepass_params.flags: V gets ONE descale per (batch, KV head), from the amax over all
 * of the head's rows, written into every entry of v_descale[b, h, :] (Q and K keep their 128-row
 * blocks). Two small kernels run first (V's block amaxes, then each head's largest): V is read
 * once more. For consumers that take one V scale per head; hattn_fwd_fp8 reads such V as any
 * other (each block's entry). About as accurate on outlier-heavy inputs as the 128-row blocks
 * (e4m3 is floating point: a scale only moves where its subnormals start). */
enum { HATTN_FP8_PREPASS_V_PER_HEAD = 1u << 1 };

/* Fill params for contiguous [b, s, h, d] inputs and outputs, no RoPE, no Hadamard (a plain block
 * quantizer). Returns params with everything else zeroed. */
HATTN_API hattn_fp8_prepass_params hattn_fp8_prepass_params_contiguous(
    const void* q, const void* k, const void* v, void* q_fp8, void* k_fp8, void* v_fp8, float* q_descale,
    float* k_descale, float* v_descale, int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k,
    int head_dim, hattn_dtype dtype);

/* Check params without launching (as hattn_fwd_validate). */
HATTN_API hattn_status hattn_fp8_prepass_validate(const hattn_fp8_prepass_params* params, char* msg, size_t msg_len);

/* The FP8 pre-pass on `stream`: for each row x (head_dim values) of q and k,
 *   1. RoPE (if rope != HATTN_ROPE_NONE), computed in fp32 (x_a cos - x_b sin and x_a sin + x_b cos,
 *      one fma each); with the Hadamard the rotated values are then rounded to bf16, the type the
 *      tensor cores take them in (a relative error of 2^-9, 1/32 of the e4m3 step that follows);
 *   2. the random-sign Hadamard transform (if hadamard): y = x D H / sqrt(head_dim), H the
 *      Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)), D = diag(s_c) with
 *      s_c = -1 where the top bit of splitmix64(hadamard_seed + c) is set, else +1 (splitmix64:
 *      add 0x9E3779B97F4A7C15, then the standard finalizer). M is orthogonal, so scores are
 *      unchanged: (Q M)(K M)^T = Q K^T;
 *   3. block quantization: per (batch, head, block of HATTN_FP8_BLOCK_ROWS rows), amax = the
 *      largest |y| of the block, descale = amax / 448 and e4m3 = cvt.rn.satfinite(y * 448 / amax)
 *      (an all-zero block gets descale 0 and zeros), so y ~= e4m3 * descale.
 * v gets step 3 only (rotating V would change the attention output). Validates first and returns
 * before any CUDA call on failure; then requires a CC 9.0 device. Outputs must not overlap the
 * inputs or each other (not checked). Tensor contents are not checked: a NaN propagates to its
 * element (and an Inf makes its block NaN). */
HATTN_API hattn_status hattn_fp8_prepass(const hattn_fp8_prepass_params* params, cudaStream_t stream);

/* ---- FP8 forward ----------------------------------------------------------------------- */

/* The FP8 forward has its own params: its inputs are e4m3 tensors with per-block descales (the
 * output of hattn_fp8_prepass) and it needs a workspace for V^T; sizes, mask, scale and LSE
 * follow hattn_fwd_params. */
typedef struct hattn_fwd_fp8_params {
    const void* q;            /* e4m3 [batch, seqlen_q, heads_q,  head_dim] (one byte per element) */
    const void* k;            /* e4m3 [batch, seqlen_k, heads_kv, head_dim] */
    const void* v;            /* e4m3 [batch, seqlen_k, heads_kv, head_dim] */
    void* o;                  /* [batch, seqlen_q, heads_q, head_dim], o_dtype */
    float* lse;               /* optional (NULL to skip): [batch, heads_q, seqlen_q] fp32, natural log */
    const float* q_descale;   /* [batch, heads_q,  ceil(seqlen_q / HATTN_FP8_BLOCK_ROWS)] fp32 */
    const float* k_descale;   /* [batch, heads_kv, ceil(seqlen_k / HATTN_FP8_BLOCK_ROWS)] fp32 */
    const float* v_descale;   /* [batch, heads_kv, ceil(seqlen_k / HATTN_FP8_BLOCK_ROWS)] fp32 */
    void* workspace;          /* >= hattn_fwd_fp8_workspace_size(...) bytes of device memory, 256-byte
                                 aligned; overwritten (V^T is written there each call) */
    size_t workspace_size;

    int batch;
    int heads_q;
    int heads_kv;             /* heads_q % heads_kv == 0 */
    int seqlen_q;
    int seqlen_k;
    int head_dim;             /* 64, 128 or 256 */

    /* Strides in elements: bytes for the e4m3 q, k, v (multiples of 16), elements of o_dtype for
     * o. head_dim is contiguous. */
    int64_t q_batch_stride, q_seq_stride, q_head_stride;
    int64_t k_batch_stride, k_seq_stride, k_head_stride;
    int64_t v_batch_stride, v_seq_stride, v_head_stride;
    int64_t o_batch_stride, o_seq_stride, o_head_stride;

    hattn_dtype o_dtype;      /* of o: bf16 or fp16 */
    float softmax_scale;      /* 0 selects the default 1/sqrt(head_dim) */
    int causal;               /* as in hattn_fwd_params (bottom-right) */
    unsigned flags;           /* 0 or HATTN_FWD_FP8_V_TRANSPOSED */

    /* Optional (NULL: none), as hattn_fwd_params.workspace (one buffer may serve both forwards on
     * a stream): hattn_fwd_workspace_size() bytes of device memory, 16-byte aligned, zero-filled
     * before the first call and left zero-filled by every call. With it causal problems of >= 1280
     * keys (d64: >= 512) run on one thread block per SM that takes its tiles from a counter there,
     * longest first (faster: bench/RESULTS.md runs 47, 51 and 54h), and so do d64 problems
     * without a mask whose query length is not a multiple of 192, up to 8192 keys (run 55d); d128
     * problems without a mask split their last pass as hattn_fwd_params.workspace says (run 56).
     * schedule_workspace_size is its size in bytes. */
    void* schedule_workspace;
    size_t schedule_workspace_size;
} hattn_fwd_fp8_params;

/* hattn_fwd_fp8_params.flags: v is already V^T in the kernel's own layout, as
 * hattn_fp8_prepass writes it with HATTN_FP8_PREPASS_V_TRANSPOSED: e4m3
 * [batch, heads_kv, head_dim, keys] contiguous, keys = seqlen_k rounded up to a multiple of 32,
 * position 32 g + p of a row holding key 32 g + 16 (p / 16) + 2 ((p % 16) / 4) + 8 ((p / 2) % 2)
 * + p % 2 (the order of the 8-bit P fragment, so P needs no shuffle), the padding keys zero.
 * v must be 16-byte aligned and hold hattn_fwd_fp8_workspace_size(...) bytes; v's strides are
 * ignored, and no transpose kernel runs: the workspace is not used (it may be NULL). */
enum { HATTN_FWD_FP8_V_TRANSPOSED = 1u << 0 };

/* Bytes of device workspace hattn_fwd_fp8 needs (0 if a size is non-positive or the total
 * overflows): V^T, batch * heads_kv * head_dim * (seqlen_k rounded up to 32) bytes. */
HATTN_API size_t hattn_fwd_fp8_workspace_size(int batch, int heads_kv, int seqlen_k, int head_dim);

/* Fill params for contiguous [b, s, h, d] tensors, the default scale, no mask, no LSE, no flags
 * and no workspace (set workspace / workspace_size before calling hattn_fwd_fp8). */
HATTN_API hattn_fwd_fp8_params hattn_fwd_fp8_params_contiguous(const void* q, const void* k, const void* v, void* o,
                                                               const float* q_descale, const float* k_descale,
                                                               const float* v_descale, int batch, int heads_q,
                                                               int heads_kv, int seqlen_q, int seqlen_k,
                                                               int head_dim, hattn_dtype o_dtype);

/* Check params without launching (as hattn_fwd_validate). */
HATTN_API hattn_status hattn_fwd_fp8_validate(const hattn_fwd_fp8_params* params, char* msg, size_t msg_len);

/* FP8 forward attention on `stream`: with Q, K, V the dequantized inputs (q[b, i, h, :] times
 * q_descale[b, h, i / HATTN_FP8_BLOCK_ROWS], likewise k and v), O = softmax(scale * Q K^T + mask) V
 * and LSE, as hattn_fwd computes them; fp32 accumulation, P rounded to e4m3 before P V. Validates
 * first (null pointers, then head_dim and o_dtype, sizes, strides and alignment, extents, scale,
 * flags, and last the workspace) and returns before any CUDA call on failure; then requires a
 * CC 9.0 device. Two kernels run on the stream: V -> V^T into the workspace, then the attention
 * (only the attention with HATTN_FWD_FP8_V_TRANSPOSED); when each KV head serves few query rows
 * (seqlen_q * heads_q / heads_kv up to 2048 at head_dim 64 and 128, 512 at 256) the attention
 * kernel alone runs and transposes V's blocks in shared memory (the workspace is still required,
 * and left untouched). At head_dim 128 and 256 the row sums
 * (O's normaliser and the LSE's sum) are those of P as rounded to e4m3, the weights P V
 * multiplies, summed on the tensor cores: O is as accurate, the LSE of a row with few keys is off
 * by up to log(1 + 2^-4) (~0.06; ~0.04 / sqrt(keys) typically) more than at head_dim 64.
 * o must not overlap the inputs, the LSE or the workspace, and two calls in flight at once (on
 * different streams) need separate workspaces (not checked). */
HATTN_API hattn_status hattn_fwd_fp8(const hattn_fwd_fp8_params* params, cudaStream_t stream);

/* A static, human-readable description of a status. */
HATTN_API const char* hattn_status_string(hattn_status status);

/* The library's version, "MAJOR.MINOR.PATCH" (a static string). Compare with the HATTN_VERSION_*
 * macros to detect a header / library mismatch. */
HATTN_API const char* hattn_version(void);

#ifdef __cplusplus
}
#endif

#endif /* HATTN_H_ */
