/*
 * classify: load a .tandem artifact, fill every input with a fixed pattern, run, print the top
 * values of each output.
 *
 *   classify MODEL.tandem [THREADS] [DUMP_FILE]
 *
 * Input i, element j is ((j * 37 + i * 11) % 256 - 128) / 128.0f: exact in float32, so another
 * program can build the same inputs. With DUMP_FILE, every output value is also written there,
 * one per line as "<output> <element> <bits as 8 hex digits> <value as %a>".
 *
 * Build: cc -I capi/include classify.c -L target/release -ltandem_capi -o classify
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem.h"

#define TOP_K 5

/* Prints the failure and returns 1 when `status` is not TANDEM_OK. */
static int failed(tandem_status status, const char *what) {
    if (status == TANDEM_OK) {
        return 0;
    }
    fprintf(stderr, "classify: %s failed: %s: %s\n", what, tandem_status_name(status),
            tandem_last_error());
    return 1;
}

static void print_shape(const tandem_tensor_info *info) {
    printf("[");
    for (size_t d = 0; d < info->rank; d++) {
        printf(d ? ", %zu" : "%zu", info->dims[d]);
    }
    printf("]");
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s MODEL.tandem [THREADS] [DUMP_FILE]\n", argv[0]);
        return 2;
    }
    size_t threads = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 1;
    const char *dump_path = argc > 3 ? argv[3] : NULL;
    int rc = 1;
    tandem_model *model = NULL;
    tandem_session_options *options = NULL;
    tandem_session *session = NULL;
    float *input = NULL;
    FILE *dump = NULL;

    printf("tandem %s\n", tandem_version());
    if (failed(tandem_model_load_file(argv[1], &model), "loading the model")) {
        goto done;
    }
    if (failed(tandem_session_options_create(&options), "creating options") ||
        failed(tandem_session_options_set_threads(options, threads), "setting threads") ||
        failed(tandem_session_create(model, options, &session), "creating the session")) {
        goto done;
    }
    /* The session holds its own reference: options and the model handle can go now. */
    tandem_session_options_free(options);
    options = NULL;

    size_t n_inputs = 0, n_outputs = 0;
    if (failed(tandem_model_input_count(model, &n_inputs), "counting inputs") ||
        failed(tandem_model_output_count(model, &n_outputs), "counting outputs")) {
        goto done;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        tandem_tensor_info info;
        if (failed(tandem_model_input_info(model, i, &info), "describing an input")) {
            goto done;
        }
        printf("input %zu '%s' ", i, info.name);
        print_shape(&info);
        printf(" (%zu bytes)\n", info.byte_size);
        free(input);
        input = malloc(info.element_count * sizeof(float) + 1);
        if (!input) {
            fprintf(stderr, "classify: out of memory\n");
            goto done;
        }
        for (size_t j = 0; j < info.element_count; j++) {
            input[j] = (float)((int)((j * 37 + i * 11) % 256) - 128) / 128.0f;
        }
        if (failed(tandem_session_set_input(session, i, input, info.element_count),
                   "setting an input")) {
            goto done;
        }
    }
    tandem_model_free(model);
    model = NULL;

    if (failed(tandem_session_run(session), "running")) {
        goto done;
    }
    if (dump_path && !(dump = fopen(dump_path, "w"))) {
        fprintf(stderr, "classify: cannot write %s\n", dump_path);
        goto done;
    }
    for (size_t o = 0; o < n_outputs; o++) {
        const float *values = NULL;
        size_t count = 0;
        if (failed(tandem_session_output(session, o, &values, &count), "reading an output")) {
            goto done;
        }
        printf("output %zu: %zu values, top %d:", o, count, TOP_K);
        /* Selection of the TOP_K largest, highest first (ties: lower index first). */
        size_t top[TOP_K];
        size_t k = 0;
        for (; k < TOP_K && k < count; k++) {
            size_t best = count;
            for (size_t j = 0; j < count; j++) {
                int taken = 0;
                for (size_t t = 0; t < k; t++) {
                    taken |= top[t] == j;
                }
                if (!taken && (best == count || values[j] > values[best])) {
                    best = j;
                }
            }
            top[k] = best;
            printf(" [%zu] %.6g", best, values[best]);
        }
        printf("\n");
        for (size_t j = 0; dump && j < count; j++) {
            uint32_t bits;
            memcpy(&bits, &values[j], sizeof bits);
            fprintf(dump, "%zu %zu %08x %a\n", o, j, (unsigned)bits, (double)values[j]);
        }
    }
    rc = 0;

done:
    if (dump && fclose(dump) != 0) {
        fprintf(stderr, "classify: cannot write %s\n", dump_path);
        rc = 1;
    }
    free(input);
    tandem_session_free(session);
    tandem_session_options_free(options);
    tandem_model_free(model);
    return rc;
}
