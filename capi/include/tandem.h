/*
 * tandem.h: the C API of tandem's runtime (crate tandem-capi).
 *
 * Load a compiled model (.tandem, written by `tandem compile`), describe its inputs and outputs,
 * create a session, set float inputs, run, read float outputs.
 *
 * Link with libtandem_capi.so / .dylib (cdylib) or libtandem_capi.a (staticlib; on Linux also
 * link -lpthread -ldl -lm).
 *
 * Errors
 *   Every fallible function returns a tandem_status; TANDEM_OK (0) is success. After any call,
 *   tandem_last_error() returns a message for the calling thread: empty after a success,
 *   otherwise naming the function, the argument or tensor and what is wrong. No Rust panic
 *   crosses this boundary: an internal bug is reported as TANDEM_ERROR_INTERNAL.
 *   Functions with an out-pointer set it to NULL first when it is a pointer-to-handle, so a
 *   failed create/load leaves NULL there.
 *
 * Ownership and lifetimes
 *   - tandem_model: created by tandem_model_load_*, released by tandem_model_free. The model is
 *     reference-counted: every session holds a reference, so the model handle may be freed
 *     while sessions created from it are still alive; the model's memory goes with the last.
 *   - tandem_tensor_info: its name and dims point into the model and stay valid while the model
 *     is alive (its handle or any session made from it).
 *   - tandem_session_options: created by tandem_session_options_create, released by
 *     tandem_session_options_free. tandem_session_create copies what it needs: options may be
 *     freed right after.
 *   - tandem_session: created by tandem_session_create, released by tandem_session_free.
 *     The pointer from tandem_session_output stays valid until the next tandem_session_run on
 *     that session or until it is freed.
 *   - Strings returned by tandem_version and tandem_status_name are static; the string from
 *     tandem_last_error belongs to the library and is valid until the next tandem call on the
 *     same thread.
 *   - Input buffers passed in are copied; the caller keeps ownership of them.
 *   - The *_free functions accept NULL. Freeing a handle twice, or using it after freeing, is
 *     undefined behaviour.
 *
 * Threads
 *   A model may be used from several threads at once (it is immutable once loaded). A session
 *   must be used by one thread at a time; create one session per thread for parallel inference.
 *   A session runs its kernels on its own CPU threads (see tandem_session_options_set_threads).
 */
#ifndef TANDEM_H
#define TANDEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every fallible call. The values are stable. */
typedef enum tandem_status {
    TANDEM_OK = 0,
    TANDEM_ERROR_NULL_ARGUMENT = 1,    /* a required pointer argument was NULL */
    TANDEM_ERROR_INVALID_ARGUMENT = 2, /* index or thread count out of range, unknown name */
    TANDEM_ERROR_IO = 3,               /* a file could not be opened or read */
    TANDEM_ERROR_INVALID_MODEL = 4,    /* not a valid artifact: magic, version, checksum, contents */
    TANDEM_ERROR_SIZE_MISMATCH = 5,    /* a buffer's element count differs from the tensor's */
    TANDEM_ERROR_OUT_OF_MEMORY = 6,    /* the activation arena could not be allocated */
    TANDEM_ERROR_NOT_READY = 7,        /* an input was never set, or no successful run yet */
    TANDEM_ERROR_RUN_FAILED = 8,       /* running the model failed */
    TANDEM_ERROR_INTERNAL = 9          /* a bug in tandem (caught panic); please report it */
} tandem_status;

/* Element type of a tensor. The values are stable; model inputs and outputs are FLOAT32 in this
 * version. */
typedef enum tandem_dtype {
    TANDEM_DTYPE_OTHER = 0,
    TANDEM_DTYPE_FLOAT32 = 1,
    TANDEM_DTYPE_FLOAT16 = 2,
    TANDEM_DTYPE_FLOAT64 = 3,
    TANDEM_DTYPE_INT8 = 4,
    TANDEM_DTYPE_UINT8 = 5,
    TANDEM_DTYPE_INT16 = 6,
    TANDEM_DTYPE_INT32 = 7,
    TANDEM_DTYPE_INT64 = 8,
    TANDEM_DTYPE_BOOL = 9
} tandem_dtype;

/* Description of a model input or output. `name` and `dims` are owned by the model (see
 * "Ownership" above). */
typedef struct tandem_tensor_info {
    const char *name;     /* NUL-terminated UTF-8 */
    tandem_dtype dtype;
    size_t rank;          /* number of values in dims */
    const size_t *dims;   /* never NULL, even for rank 0 */
    size_t element_count; /* product of dims */
    size_t byte_size;     /* element_count times the element size */
} tandem_tensor_info;

typedef struct tandem_model tandem_model;                     /* opaque */
typedef struct tandem_session_options tandem_session_options; /* opaque */
typedef struct tandem_session tandem_session;                 /* opaque */

/* Most threads tandem_session_options_set_threads accepts. */
#define TANDEM_MAX_THREADS 256

/* ---- Library ---------------------------------------------------------------------------- */

/* The library version, e.g. "0.1.0". Static, never NULL. */
const char *tandem_version(void);

/* "TANDEM_OK", "TANDEM_ERROR_SIZE_MISMATCH", ...; "TANDEM_UNKNOWN_STATUS" for other values.
 * Static, never NULL. */
const char *tandem_status_name(int status);

/* The message of the last tandem call on this thread ("" after a success). Never NULL; valid
 * until the next tandem call on this thread. */
const char *tandem_last_error(void);

/* ---- Models ----------------------------------------------------------------------------- */

/* Loads and validates a .tandem artifact from `path` (NUL-terminated; bytes on Unix, UTF-8
 * elsewhere). Errors: NULL_ARGUMENT, IO (cannot open), INVALID_MODEL (corrupt, truncated, wrong
 * version, fails validation). On failure *out_model is NULL. */
tandem_status tandem_model_load_file(const char *path, tandem_model **out_model);

/* Loads and validates an artifact from `size` bytes at `data`. The bytes are copied; the caller
 * may free them when the call returns. Errors: NULL_ARGUMENT, INVALID_MODEL. */
tandem_status tandem_model_load_memory(const void *data, size_t size, tandem_model **out_model);

/* Releases the handle (sessions keep the model alive). NULL is ignored. */
void tandem_model_free(tandem_model *model);

/* Number of inputs / outputs. */
tandem_status tandem_model_input_count(const tandem_model *model, size_t *out_count);
tandem_status tandem_model_output_count(const tandem_model *model, size_t *out_count);

/* Describes input / output `index` (model order). Errors: NULL_ARGUMENT, INVALID_ARGUMENT
 * (index out of range). */
tandem_status tandem_model_input_info(const tandem_model *model, size_t index,
                                      tandem_tensor_info *out_info);
tandem_status tandem_model_output_info(const tandem_model *model, size_t index,
                                       tandem_tensor_info *out_info);

/* Index of the input / output called `name`. Errors: NULL_ARGUMENT, INVALID_ARGUMENT (no such
 * name; the message lists the names). */
tandem_status tandem_model_input_index(const tandem_model *model, const char *name,
                                       size_t *out_index);
tandem_status tandem_model_output_index(const tandem_model *model, const char *name,
                                        size_t *out_index);

/* ---- Session options -------------------------------------------------------------------- */

/* New options with the defaults (threads = 0). Free with tandem_session_options_free. */
tandem_status tandem_session_options_create(tandem_session_options **out_options);

/* CPU threads: 1..TANDEM_MAX_THREADS, or 0 for the count the model was compiled for (capped at
 * the host's available parallelism). Errors: NULL_ARGUMENT, INVALID_ARGUMENT. */
tandem_status tandem_session_options_set_threads(tandem_session_options *options, size_t threads);

/* NULL is ignored. */
void tandem_session_options_free(tandem_session_options *options);

/* ---- Sessions --------------------------------------------------------------------------- */

/* Creates a session: allocates the activation arena and starts the threads. `options` may be
 * NULL (defaults). Errors: NULL_ARGUMENT, OUT_OF_MEMORY. On failure *out_session is NULL. */
tandem_status tandem_session_create(const tandem_model *model,
                                    const tandem_session_options *options,
                                    tandem_session **out_session);

/* Releases the session and its reference to the model. NULL is ignored. */
void tandem_session_free(tandem_session *session);

/* Copies `count` floats (C order) into input `index`; `count` must equal the input's
 * element_count. Inputs stay set across runs. Errors: NULL_ARGUMENT, INVALID_ARGUMENT (index),
 * SIZE_MISMATCH. */
tandem_status tandem_session_set_input(tandem_session *session, size_t index, const float *data,
                                       size_t count);

/* Runs the model. Every input must have been set. Errors: NULL_ARGUMENT, NOT_READY,
 * RUN_FAILED. A failed run leaves no outputs. */
tandem_status tandem_session_run(tandem_session *session);

/* Points *out_data at output `index` (C order, *out_count floats), owned by the session and
 * valid until the next run or free. Errors: NULL_ARGUMENT, INVALID_ARGUMENT, NOT_READY. */
tandem_status tandem_session_output(const tandem_session *session, size_t index,
                                    const float **out_data, size_t *out_count);

/* Copies output `index` into `dst` of `count` floats; `count` must equal the output's
 * element_count. Errors: NULL_ARGUMENT, INVALID_ARGUMENT, NOT_READY, SIZE_MISMATCH. */
tandem_status tandem_session_copy_output(const tandem_session *session, size_t index, float *dst,
                                         size_t count);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_H */
