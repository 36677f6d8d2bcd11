/*
 * Error paths of the C API, checked from C (so the header's enum values and signatures are the
 * ones the library implements). Run by capi/tests/c_example.rs:
 *
 *   errors VALID.tandem CORRUPT.tandem MISSING_PATH
 *
 * Prints one line per check and exits 0 only if every check passed.
 */
#include <stdio.h>
#include <string.h>

#include "tandem.h"

static int failures = 0;

/* Checks that `got` is `want` and that the last error contains `needle` (empty: is empty). */
static void expect(const char *what, tandem_status got, tandem_status want, const char *needle) {
    const char *message = tandem_last_error();
    int ok = got == want &&
             (needle[0] ? strstr(message, needle) != NULL : message[0] == '\0');
    printf("%s %s: %s (%s)\n", ok ? "ok  " : "FAIL", what, tandem_status_name(got), message);
    failures += !ok;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s VALID.tandem CORRUPT.tandem MISSING_PATH\n", argv[0]);
        return 2;
    }
    tandem_model *model = (tandem_model *)&failures; /* must be reset to NULL on failure */
    expect("load corrupt file", tandem_model_load_file(argv[2], &model),
           TANDEM_ERROR_INVALID_MODEL, "checksum");
    if (model != NULL) {
        printf("FAIL out_model not NULL after a failed load\n");
        failures++;
    }
    expect("load missing file", tandem_model_load_file(argv[3], &model), TANDEM_ERROR_IO,
           "cannot open");
    expect("load NULL path", tandem_model_load_file(NULL, &model), TANDEM_ERROR_NULL_ARGUMENT,
           "`path` is NULL");
    expect("load from garbage memory", tandem_model_load_memory("not a model", 11, &model),
           TANDEM_ERROR_INVALID_MODEL, "bad magic");
    expect("load NULL memory", tandem_model_load_memory(NULL, 0, &model),
           TANDEM_ERROR_NULL_ARGUMENT, "`data` is NULL");
    expect("load valid file", tandem_model_load_file(argv[1], &model), TANDEM_OK, "");

    size_t n = 0;
    tandem_tensor_info info;
    expect("count with NULL model", tandem_model_input_count(NULL, &n),
           TANDEM_ERROR_NULL_ARGUMENT, "`model` is NULL");
    expect("count into NULL", tandem_model_input_count(model, NULL), TANDEM_ERROR_NULL_ARGUMENT,
           "`out_count` is NULL");
    expect("info out of range", tandem_model_input_info(model, 99, &info),
           TANDEM_ERROR_INVALID_ARGUMENT, "input index 99 is out of range");
    expect("index of unknown name", tandem_model_output_index(model, "no such tensor", &n),
           TANDEM_ERROR_INVALID_ARGUMENT, "no output named 'no such tensor'");
    expect("info of input 0", tandem_model_input_info(model, 0, &info), TANDEM_OK, "");
    if (info.dtype != TANDEM_DTYPE_FLOAT32 || info.byte_size != 4 * info.element_count) {
        printf("FAIL input 0 is not described as FLOAT32\n");
        failures++;
    }

    tandem_session_options *options = NULL;
    expect("options create", tandem_session_options_create(&options), TANDEM_OK, "");
    expect("too many threads", tandem_session_options_set_threads(options, 100000),
           TANDEM_ERROR_INVALID_ARGUMENT, "100000 threads");
    tandem_session *session = NULL;
    expect("session with NULL model", tandem_session_create(NULL, options, &session),
           TANDEM_ERROR_NULL_ARGUMENT, "`model` is NULL");
    expect("session", tandem_session_create(model, options, &session), TANDEM_OK, "");
    tandem_session_options_free(options);

    float small[3] = {0, 0, 0};
    expect("run before inputs", tandem_session_run(session), TANDEM_ERROR_NOT_READY,
           "was not set");
    expect("wrong input size", tandem_session_set_input(session, 0, small, 3),
           TANDEM_ERROR_SIZE_MISMATCH, "got 3");
    expect("NULL input data", tandem_session_set_input(session, 0, NULL, info.element_count),
           TANDEM_ERROR_NULL_ARGUMENT, "`data` is NULL");
    expect("input index out of range", tandem_session_set_input(session, 42, small, 3),
           TANDEM_ERROR_INVALID_ARGUMENT, "input index 42");
    const float *out = NULL;
    expect("output before run", tandem_session_output(session, 0, &out, &n),
           TANDEM_ERROR_NOT_READY, "has not succeeded");
    expect("run NULL session", tandem_session_run(NULL), TANDEM_ERROR_NULL_ARGUMENT,
           "`session` is NULL");
    expect("copy into NULL", tandem_session_copy_output(session, 0, NULL, 1),
           TANDEM_ERROR_NULL_ARGUMENT, "`dst` is NULL");
    if (strcmp(tandem_status_name(12345), "TANDEM_UNKNOWN_STATUS") != 0) {
        printf("FAIL unknown status name\n");
        failures++;
    }

    tandem_session_free(session);
    tandem_model_free(model);
    tandem_model_free(NULL);
    tandem_session_free(NULL);
    tandem_session_options_free(NULL);
    printf("%d failures\n", failures);
    return failures != 0;
}
