/* bench/cscan.c: one compiled pass over a block of log lines, for bench/cscan.py.
 *
 * A measurement only, not shipped code: how fast would a single compiled pass be that computes
 * the per-block summary the pure-Python scanner (oomdoctor/read/scan.py, stats.py) gets from
 * many C-level bytes.count passes and a regex? Plain C99 plus memchr/memmem (no Python API),
 * called through ctypes. Memory-safe for arbitrary bytes: every read stays inside [buf, buf+len),
 * and a last line without its newline is a line too.
 *
 * Build: gcc -O2 -shared -fPIC -o bench/out/cscan.so bench/cscan.c
 * (-DCSCAN_MEMMEM searches with glibc memmem instead of the memchr-on-a-rare-byte search.) */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t newlines;   /* b"\n" in the buffer */
    int64_t prefill;    /* lines holding "Prefill batch" */
    int64_t decode;     /* lines holding "Decode batch" */
    int64_t access;     /* lines holding " HTTP/1." */
    int64_t retraction; /* lines holding the retraction marker */
    int64_t usage;      /* occurrences of "token usage: d.dd" (as re.findall finds them) */
    int64_t high;       /* of which d.dd >= 0.95 */
    int64_t peak;       /* highest d.dd in hundredths; -1 if none */
    int64_t other;      /* lines not blank and holding none of the four line markers */
} cscan_result;

typedef struct {
    const char *text;
    size_t len;
    size_t key; /* index of a rare byte of the needle: memchr looks for it */
} needle;

#define NEEDLE(s, k) {s, sizeof(s) - 1, k}
/* Keys: the needle's rarest byte in the generated logs ('D' would stop at every "DP0"). */
static const needle PREFILL = NEEDLE("Prefill batch", 3); /* 'f' */
static const needle DECODE = NEEDLE("Decode batch", 7);   /* 'b' */
static const needle ACCESS = NEEDLE(" HTTP/1.", 1);       /* 'H' */
static const needle RETRACT = NEEDLE("KV cache pool is full. Retract requests.", 1); /* 'V' */
static const needle USAGE = NEEDLE("token usage: ", 7);   /* 's' */

/* The first occurrence of n in [p, end), or NULL. */
static const char *find(const char *p, const char *end, const needle *n) {
    if ((size_t)(end - p) < n->len) return NULL;
#ifdef CSCAN_MEMMEM
    return memmem(p, (size_t)(end - p), n->text, n->len);
#else
    /* The key byte can sit at p + key .. end - len + key: any later one cannot start a match. */
    const char *q = p + n->key, *last = end - n->len + n->key;
    while (q <= last) {
        q = memchr(q, (unsigned char)n->text[n->key], (size_t)(last - q) + 1);
        if (q == NULL) return NULL;
        if (memcmp(q - n->key, n->text, n->len) == 0) return q - n->key;
        q++;
    }
    return NULL;
#endif
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Every "token usage: d.dd" of one line, non-overlapping, left to right (as re.findall). */
static void usage_of(const char *p, const char *end, cscan_result *r) {
    const char *m;
    while ((m = find(p, end, &USAGE)) != NULL) {
        const char *v = m + USAGE.len;
        p = v; /* the needle cannot overlap itself: a failed match resumes after it */
        if (end - v >= 4 && is_digit(v[0]) && v[1] == '.' && is_digit(v[2]) && is_digit(v[3])) {
            int64_t x = (v[0] - '0') * 100 + (v[2] - '0') * 10 + (v[3] - '0');
            r->usage++;
            r->high += x >= 95;
            if (x > r->peak) r->peak = x;
            p = v + 4;
        }
    }
}

/* Blank as the scanner's skipping regex means it: only spaces, tabs and carriage returns. */
static int blank(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r') return 0;
    return 1;
}

/* flags bit 0: newlines only (no marker search), to see what memchr alone costs. */
void cscan(const char *buf, size_t len, int flags, cscan_result *r) {
    const char *p = buf, *end = buf + len;
    memset(r, 0, sizeof *r);
    r->peak = -1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end; /* the line is [p, e) */
        if (nl) r->newlines++;
        if (!(flags & 1)) {
            int pre = find(p, e, &PREFILL) != NULL, dec = find(p, e, &DECODE) != NULL;
            int acc = find(p, e, &ACCESS) != NULL, ret = find(p, e, &RETRACT) != NULL;
            r->prefill += pre;
            r->decode += dec;
            r->access += acc;
            r->retraction += ret;
            usage_of(p, e, r);
            if (!(pre | dec | acc | ret) && !blank(p, e)) r->other++;
        }
        if (nl == NULL) break; /* a last line without its newline */
        p = nl + 1;
    }
}
