/* libFuzzer harness for zt-train's configuration reader (train/train_config.c):
 * the --config JSON reader (zt_train_config_parse_json) and the flag parser
 * (zt_train_config_parse), each followed by zt_train_config_validate, and then
 * zt_train_config_print (into /dev/null) and zt_train_config_settings on
 * whatever configuration resulted, accepted or not. An accepted JSON file's
 * string options (data, save_dir, resume, log_dir) must arrive whole.
 *
 * Input: byte 0 selects the mode (byte 0 % 3), the rest is its payload.
 *   0  JSON: the payload is a --config file's text.
 *   1  flags: the payload split at NUL bytes is argv[1..] after "zt-train"
 *      (at most 63 arguments; the rest is ignored). An argument "--config" is
 *      dropped, so no file is ever opened.
 *   2  both: the payload up to its first NUL is JSON text, applied first; the
 *      rest is flags as in mode 1, parsed into the same configuration (what
 *      `--config F --flag ...` does, flags over the file).
 * Seeds: tests/fuzz/corpus/config/. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "train_config.h"

#define MAX_ARGS 64

/* ZT_FUZZ_VERBOSE=1 in the environment: each parse's outcome on stderr. */
static void report(const char *what, zt_status st, const zt_error *err) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("ZT_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz_config: %s: %s\n", what, st == ZT_OK ? "ok" : err->msg);
}

static const char *identity(void *arg, const char *option) {
    (void)arg;
    (void)option;
    return "fuzz-identity";
}

static FILE *devnull(void) {
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) abort();
    return f;
}

/* Flags from p[n]: NUL-separated arguments, each its own exact-size copy (so
 * that ASan sees a read past any one of them). */
static void parse_flags(zt_train_config *cfg, const uint8_t *p, size_t n) {
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = strdup("zt-train");
    size_t start = 0;
    for (size_t i = 0; n > 0 && i <= n && argc < MAX_ARGS; i++) {
        if (i < n && p[i] != '\0') continue;
        size_t len = i - start;
        if (!(len == 8 && memcmp(p + start, "--config", 8) == 0)) {
            char *a = malloc(len + 1);
            if (!a) abort();
            memcpy(a, p + start, len);
            a[len] = '\0';
            argv[argc++] = a;
        }
        start = i + 1;
    }
    argv[argc] = NULL;
    int want_help = 0;
    zt_error err = {0};
    zt_status st = zt_train_config_parse(cfg, argc, argv, &want_help, &err);
    report("flags", st, &err);
    if (st == ZT_OK && !want_help) {
        zt_error verr = {0};
        report("validate", zt_train_config_validate(cfg, &verr), &verr);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
}

/* An accepted file's string options hold exactly the file's strings (none
 * cut short on the way). */
static void check_strings(const zt_train_config *cfg, const char *text, size_t n) {
    static const struct {
        const char *key;
        size_t offset;
    } fields[] = {
        {"data", offsetof(zt_train_config, data)},
        {"save_dir", offsetof(zt_train_config, save_dir)},
        {"resume", offsetof(zt_train_config, resume)},
        {"log_dir", offsetof(zt_train_config, log_dir)},
    };
    json_error_t jerr;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) abort(); /* the reader accepted it */
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *want = json_string_value(json_object_get(root, fields[i].key));
        const char *got = (const char *)cfg + fields[i].offset;
        if (want && strcmp(want, got) != 0) {
            fprintf(stderr, "fuzz_config: \"%s\" is %zu characters in the file, %zu in the configuration\n",
                    fields[i].key, strlen(want), strlen(got));
            abort();
        }
    }
    json_decref(root);
}

static void parse_json(zt_train_config *cfg, const uint8_t *p, size_t n) {
    /* an exact-size copy without a terminating NUL: the reader must honour n */
    char *text = malloc(n ? n : 1);
    if (!text) abort();
    if (n) memcpy(text, p, n);
    zt_error err = {0};
    zt_status st = zt_train_config_parse_json(cfg, text, n, "fuzz.json", &err);
    report("json", st, &err);
    if (st == ZT_OK) {
        zt_error verr = {0};
        report("validate", zt_train_config_validate(cfg, &verr), &verr);
        check_strings(cfg, text, n);
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] % 3;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    zt_train_config cfg;
    zt_train_config_defaults(&cfg);
    if (mode == 0) parse_json(&cfg, p, n);
    else if (mode == 1) parse_flags(&cfg, p, n);
    else {
        const uint8_t *nul = memchr(p, '\0', n);
        size_t jn = nul ? (size_t)(nul - p) : n;
        parse_json(&cfg, p, jn);
        if (nul) parse_flags(&cfg, nul + 1, n - jn - 1);
    }
    zt_train_config_print(&cfg, devnull());
    zt_setting rows[ZT_MAX_SETTINGS];
    int nrows = zt_train_config_settings(&cfg, identity, NULL, rows, ZT_MAX_SETTINGS);
    if (nrows < 0 || nrows > ZT_MAX_SETTINGS) abort();
    for (int i = 0; i < nrows; i++)
        if (!memchr(rows[i].name, '\0', sizeof rows[i].name) || !memchr(rows[i].value, '\0', sizeof rows[i].value))
            abort(); /* every row is a terminated string */
    return 0;
}
