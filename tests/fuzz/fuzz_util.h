/* Shared by the checkpoint harnesses (fuzz_manifest.c, fuzz_export.c). */
#ifndef ZT_FUZZ_UTIL_H
#define ZT_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

/* A harness's own check failed: what the reader promised does not hold. */
#define FUZZ_CHECK(cond)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: harness check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* ZT_FUZZ_VERBOSE=1 in the environment: each input's outcome on stderr (to
 * see how far a seed gets). */
static inline int fuzz_verbose(void) {
    static int v = -1;
    if (v < 0) v = getenv("ZT_FUZZ_VERBOSE") != NULL;
    return v;
}

/* The manifest text[len] with a correct self-checksum: everything from the
 * last "manifest_xxh64" key on is dropped (or, with no such key, the closing
 * brace and the white space around it, and ",\n " is put in their place),
 * then the key, the XXH64 and the closing brace are appended as
 * ckpt_manifest_text writes them. malloc'd, exactly *out_len bytes (no NUL). */
static inline char *fuzz_reseal(const char *text, size_t len, size_t *out_len) {
    static const char key[] = "\"manifest_xxh64\"";
    const char *last = NULL;
    for (const char *p = text; len >= sizeof key - 1 && (p = memmem(p, len - (size_t)(p - text), key, sizeof key - 1));
         p++)
        last = p;
    size_t n = last ? (size_t)(last - text) : len;
    char *head = malloc(n + 4);
    FUZZ_CHECK(head != NULL);
    if (n) memcpy(head, text, n);
    if (!last) {
        while (n > 0 && strchr(" \t\r\n", head[n - 1]) && head[n - 1]) n--;
        if (n > 0 && head[n - 1] == '}') n--;
        while (n > 0 && strchr(" \t\r\n", head[n - 1]) && head[n - 1]) n--;
        memcpy(head + n, ",\n ", 3);
        n += 3;
    }
    char *sealed = ckpt_manifest_seal(head, n, out_len);
    free(head);
    FUZZ_CHECK(sealed != NULL);
    char *exact = malloc(*out_len); /* no slack after the text: a read past it is an ASan report */
    FUZZ_CHECK(exact != NULL);
    memcpy(exact, sealed, *out_len);
    free(sealed);
    return exact;
}

#endif
