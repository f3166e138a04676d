/* hattn/test/consumers/consumer_checks.h -- what every consumer project checks, in plain C so a C
 * and a C++ program can share it: the header and the library agree on the version, and the C API
 * validates a deliberately bad call (no GPU needed: validation touches no device state, and
 * hattn_fwd returns the validation status before any CUDA call). */
#ifndef HATTN_CONSUMER_CHECKS_H_
#define HATTN_CONSUMER_CHECKS_H_

#include <hattn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int hattn_consumer_expect(int ok, const char* consumer, const char* what) {
    if (!ok) fprintf(stderr, "%s: FAIL: %s\n", consumer, what);
    return ok ? 0 : 1;
}

/* 0 when every check passes; prints what failed otherwise. */
static int hattn_consumer_checks(const char* consumer) {
    char expected[32];
    char msg[256];
    int failures = 0;
    /* Stand-in 256-byte aligned addresses: validation never dereferences them. */
    const void* q = (const void*)(uintptr_t)0x10000;
    const void* k = (const void*)(uintptr_t)0x20000;
    const void* v = (const void*)(uintptr_t)0x30000;
    void* o = (void*)(uintptr_t)0x40000;
    hattn_fwd_params p;
    hattn_status st;

    snprintf(expected, sizeof expected, "%d.%d.%d", HATTN_VERSION_MAJOR, HATTN_VERSION_MINOR, HATTN_VERSION_PATCH);
    failures += hattn_consumer_expect(hattn_version() != NULL && strcmp(hattn_version(), expected) == 0, consumer,
                                      "hattn_version() differs from the header's HATTN_VERSION_*");

    /* A head dim hattn does not build. */
    p = hattn_fwd_params_contiguous(q, k, v, o, 1, 4, 4, 100, 100, 96, HATTN_DTYPE_BF16);
    st = hattn_fwd_validate(&p, msg, sizeof msg);
    failures += hattn_consumer_expect(st == HATTN_ERROR_UNSUPPORTED_HEAD_DIM && strstr(msg, "head_dim = 96") != NULL,
                                      consumer, "head_dim 96 is not rejected with a message naming it");

    /* A NaN scale, through hattn_fwd: the status comes back before any CUDA call. */
    p = hattn_fwd_params_contiguous(q, k, v, o, 1, 4, 4, 100, 100, 128, HATTN_DTYPE_BF16);
    p.softmax_scale = NAN;
    st = hattn_fwd(&p, (cudaStream_t)0);
    failures += hattn_consumer_expect(st == HATTN_ERROR_INVALID_SCALE, consumer, "a NaN scale is not rejected");
    st = hattn_fwd_validate(&p, msg, sizeof msg);
    failures += hattn_consumer_expect(st == HATTN_ERROR_INVALID_SCALE && strstr(msg, "softmax_scale = nan") != NULL,
                                      consumer, "the NaN-scale message does not name the value");

    if (failures == 0) printf("%s: OK (hattn %s; %s)\n", consumer, hattn_version(), hattn_status_string(st));
    return failures == 0 ? 0 : 1;
}

#endif /* HATTN_CONSUMER_CHECKS_H_ */
