/* Kineto event chunks scanned in one pass: where each event's fields lie, no objects made.
 *
 * scan(payload, spans, values, kinds, arg_spans, arg_values, arg_kinds, arg_found, high) reads
 * "[{...},...]" (a chunk of the traceEvents array) and, for every event, writes the byte spans
 * of the event and of its fields ph, cat, name, pid, tid, ts, dur, id and args (-1 where
 * absent), the kind of each of the five scalar fields and, for plain integers, their value;
 * the same (span, kind, integer value) for the args keys the importer reads (ARG_KEYS), at the
 * args' top level; and in arg_found (uint32) a bit per ARG_KEYS key that some string of the
 * args equals, at any depth, key or value, plus FOUND_ESCAPED (bit 31) where a string of the
 * args held an escape (see note_string). The whole payload is validated as JSON
 * (strings, escapes, numbers, literals, nesting); anything this scanner does not settle
 * alone (invalid text, a key written with escapes, a field or args key named twice, an escape inside one
 * of the short string fields, nesting deeper than MAX_DEPTH) returns UNSUPPORTED: the caller
 * then decodes the chunk the general way. Bytes >= 0x80 are left to the caller's UTF-8 check:
 * high (one writable byte) is set to 1 where a string held one (or a few bytes after a
 * string's end did: never 0 where one did), else 0.
 *
 * phase_codes(payload, spans, code_of_byte, out) reads the phase of each event scan found:
 * the code of its one character (out of 256 int64 codes), -1 where absent or longer.
 *
 * gather(payload, starts, ends, sep, prefix, suffix, fill) concatenates byte spans of payload
 * (a span starting below 0 gives fill).
 *
 * compact(payload, starts, ends, fill) writes the texts of byte spans of payload back to back,
 * each with Kineto's line breaks and the indentation after them removed (as kineto_text's
 * compaction does), and their lengths.
 *
 * join(data, offsets, codes) concatenates the texts of a string table (its value bytes and its
 * int32 offsets, as Arrow lays out a string array) in the order of codes, skipping the codes
 * below 0: what the timeline writer's records are made of.
 *
 * digits(values, prefix, suffix) writes each int64 value in decimal between prefix and
 * suffix: a string table's value bytes and int32 offsets (as Arrow lays them out).
 *
 * cut_ids(data, offsets) writes each text of a string table with Kineto's per-task ids cut
 * from its front: the leading `"key": integer, ` pairs of TASK_ID_KEYS right after its
 * opening brace (what the regular expression KINETO_TASK_IDS of analysis/ops.py matches).
 *
 * named_keys(data, offsets, rows) tells, for each row of a string table, whether its text
 * holds a quoted name of NAMED_KEYS or a quoted [a-z0-9_]+_ratio (what the regular
 * expression ASCEND_ARG_KEYS of analysis/advisor/context.py finds).
 *
 * scatter(values, position, out) writes out[position[i]] = values[i] for every i: integers
 * (int8, int16, int32, int64) into integers at least as wide, float64 into float64, as
 * numpy's out[position] = values does; IndexError where a position lies outside out.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifndef _WIN32
#include <pthread.h>
#endif
#include "../_decimal.h"

enum { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ID, F_ARGS, N_FIELDS };
/* spans per event: the event, then each field */
#define N_SPANS (2 + 2 * N_FIELDS)
/* the scalar fields whose kind and integer value are written */
#define N_SCALARS 5
static const int SCALAR_FIELD[N_SCALARS] = {F_PID, F_TID, F_TS, F_DUR, F_ID};

enum {
    K_ABSENT = 0,
    K_INT = 1,    /* an integer of at most 18 digits: its value is written */
    K_NUMBER = 2, /* any other number */
    K_STRING = 3,
    K_NULL = 4,
    K_BOOL = 5,
    K_NESTED = 6 /* an object or an array */
};

#define UNSUPPORTED (-1)
#define TOO_MANY (-2)
#define MAX_DEPTH 64

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    int escaped; /* the last string scanned held a backslash escape */
    uint64_t high; /* the bytes of the strings scanned (and a few after them) or-ed: bit 7 of
                    * a byte set where a byte >= 0x80 was read */
} Cursor;

static inline void skip_ws(Cursor *c) {
    /* every whitespace byte is at most ' ', and most tokens follow none */
    while (c->p < c->end && *c->p <= ' ' &&
           (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

/* Bytes that end a string's plain run: the quote, the backslash, control characters. */
static unsigned char SPECIAL[256];

static void init_special(void) {
    for (int i = 0; i < 0x20; i++) SPECIAL[i] = 1;
    SPECIAL['"'] = 1;
    SPECIAL['\\'] = 1;
}

static inline int is_hex(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* The UTF-16 code unit of the four hex digits at q (checked: -1 when one is not hex). */
static int hex_unit(const unsigned char *q) {
    int unit = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char ch = q[i];
        if (!is_hex(ch)) return -1;
        unit = unit * 16 + (ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    return unit;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDS_LITTLE_ENDIAN 1
/* A flag (the high bit) in each byte of w that ends a string's plain run (SPECIAL), and
 * perhaps in bytes after the first such one: only the lowest flag is exact, and only it is
 * read. Bytes >= 0x80 are never flagged. */
static inline uint64_t special_bytes(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
            ((w - ones * 0x20) & ~w)) &
           high;
}
#endif

/* At an opening quote: past the closing one; 0 on invalid text. */
static inline int scan_string(Cursor *c) {
    c->escaped = 0;
    c->p++;
    for (;;) {
        /* the common case: plain bytes, eight at a time while far from the end */
#ifdef WORDS_LITTLE_ENDIAN
        while (c->end - c->p >= 8) {
            uint64_t w;
            memcpy(&w, c->p, 8);
            c->high |= w;
            uint64_t flags = special_bytes(w);
            if (flags != 0) {
                c->p += __builtin_ctzll(flags) >> 3;
                break;
            }
            c->p += 8;
        }
#else
        while (c->end - c->p >= 8) {
            const unsigned char *q = c->p;
            c->high |= q[0] | q[1] | q[2] | q[3] | q[4] | q[5] | q[6] | q[7];
            if (SPECIAL[q[0]] | SPECIAL[q[1]] | SPECIAL[q[2]] | SPECIAL[q[3]] | SPECIAL[q[4]] |
                SPECIAL[q[5]] | SPECIAL[q[6]] | SPECIAL[q[7]])
                break;
            c->p += 8;
        }
#endif
        while (c->p < c->end && !SPECIAL[*c->p]) c->high |= *c->p++;
        if (c->p >= c->end) return 0;
        unsigned char ch = *c->p;
        if (ch == '"') {
            c->p++;
            return 1;
        }
        if (ch < 0x20) return 0;
        /* a backslash */
        c->escaped = 1;
        if (c->p + 1 >= c->end) return 0;
        unsigned char e = c->p[1];
        if (e == 'u') {
            /* as the general decoder reads them: a surrogate only in a high-low pair */
            if (c->p + 6 > c->end) return 0;
            int unit = hex_unit(c->p + 2);
            if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) return 0;
            c->p += 6;
            if (unit >= 0xD800 && unit <= 0xDBFF) {
                if (c->p + 6 > c->end || c->p[0] != '\\' || c->p[1] != 'u') return 0;
                int low = hex_unit(c->p + 2);
                if (low < 0xDC00 || low > 0xDFFF) return 0;
                c->p += 6;
            }
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                   e == 'r' || e == 't') {
            c->p += 2;
        } else {
            return 0;
        }
    }
}

/* At a number's first byte: past it; 0 on invalid text. *is_int: a plain integer of at
 * most 18 digits, its value in *value. */
static inline int scan_number(Cursor *c, int *is_int, int64_t *value) {
    const unsigned char *p = c->p, *end = c->end;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end) return 0;
    const unsigned char *digits = p;
    /* the integer part's value as it is read (it wraps past 19 digits: then not used) */
    uint64_t v = 0;
    if (*p == '0') {
        p++;
    } else if ((unsigned)(*p - '1') < 9u) {
        while (p < end && (unsigned)(*p - '0') < 10u) v = v * 10 + (uint64_t)(*p++ - '0');
    } else {
        return 0;
    }
    size_t n_digits = (size_t)(p - digits);
    c->p = p;
    int plain = 1;
    if (c->p < c->end && *c->p == '.') {
        plain = 0;
        c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        plain = 0;
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
    }
    *is_int = plain && n_digits <= 18;
    if (*is_int) *value = negative ? -(int64_t)v : (int64_t)v;
    return 1;
}

static int scan_literal(Cursor *c, const char *word, size_t len) {
    if ((size_t)(c->end - c->p) < len || memcmp(c->p, word, len) != 0) return 0;
    c->p += len;
    return 1;
}

/* After an element of an object or array: past the comma and the whitespace after it (1),
 * at the closer `close` (2), or 0 on anything else (or the end of the text). */
static int next_element(Cursor *c, unsigned char close) {
    skip_ws(c);
    if (c->p >= c->end) return 0;
    if (*c->p == ',') {
        c->p++;
        skip_ws(c);
        return c->p < c->end ? 1 : 0;
    }
    return *c->p == close ? 2 : 0;
}

/* Bit of an event's arg_found: a string of its args held an escape. */
#define FOUND_ESCAPED (1u << 31)

static void note_string(uint32_t *found, const unsigned char *quote, const Cursor *c);

/* At a value's first byte: past the value; 0 on invalid or unsupported text. *kind: what
 * it is; *value: a plain integer's value. Nested values are walked without recursion.
 * found (NULL: not looked for): each string of the value, a key or a value at any depth,
 * noted (note_string). scan_value reads a string or a non-negative number where it is
 * called (what most fields hold), anything else through scan_any_value. */
static int scan_any_value(Cursor *c, int *kind, int64_t *value, uint32_t *found);

static inline int scan_value(Cursor *c, int *kind, int64_t *value, uint32_t *found) {
    if (c->p < c->end) {
        unsigned char ch = *c->p;
        if (ch == '"') {
            *kind = K_STRING;
            const unsigned char *quote = c->p;
            if (!scan_string(c)) return 0;
            if (found != NULL) note_string(found, quote, c);
            return 1;
        }
        if ((unsigned)(ch - '0') < 10u) {
            int is_int = 0;
            if (!scan_number(c, &is_int, value)) return 0;
            *kind = is_int ? K_INT : K_NUMBER;
            return 1;
        }
    }
    return scan_any_value(c, kind, value, found);
}

/* Called by scan_value only: strings and non-negative numbers are read there. */
static int scan_any_value(Cursor *c, int *kind, int64_t *value, uint32_t *found) {
    if (c->p >= c->end) return 0;
    unsigned char ch = *c->p;
    if (ch == '-') {
        int is_int = 0;
        if (!scan_number(c, &is_int, value)) return 0;
        *kind = is_int ? K_INT : K_NUMBER;
        return 1;
    }
    if (ch == 't') {
        *kind = K_BOOL;
        return scan_literal(c, "true", 4);
    }
    if (ch == 'f') {
        *kind = K_BOOL;
        return scan_literal(c, "false", 5);
    }
    if (ch == 'n') {
        *kind = K_NULL;
        return scan_literal(c, "null", 4);
    }
    if (ch != '{' && ch != '[') return 0;
    *kind = K_NESTED;
    /* closers expected, innermost last; an object's next element is a key then a value */
    char stack[MAX_DEPTH];
    int depth = 0;
    for (;;) {
        /* at the start of a value, or of an object member when in an object */
        ch = *c->p;
        if (ch == '{' || ch == '[') {
            if (depth == MAX_DEPTH) return 0;
            stack[depth++] = (ch == '{') ? '}' : ']';
            c->p++;
            skip_ws(c);
            if (c->p >= c->end) return 0;
            if (*c->p == (unsigned char)stack[depth - 1]) { /* empty */
                c->p++;
                depth--;
                goto after_value;
            }
            if (stack[depth - 1] == '}') goto member;
            continue; /* the array's first value */
        }
        {
            int k = 0;
            int64_t v = 0;
            if (ch == '"') {
                const unsigned char *quote = c->p;
                if (!scan_string(c)) return 0;
                if (found != NULL) note_string(found, quote, c);
            } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                int is_int = 0;
                if (!scan_number(c, &is_int, &v)) return 0;
            } else if (ch == 't') {
                if (!scan_literal(c, "true", 4)) return 0;
            } else if (ch == 'f') {
                if (!scan_literal(c, "false", 5)) return 0;
            } else if (ch == 'n') {
                if (!scan_literal(c, "null", 4)) return 0;
            } else {
                return 0;
            }
            (void)k;
        }
    after_value:
        for (;;) {
            if (depth == 0) return 1;
            skip_ws(c);
            if (c->p >= c->end) return 0;
            if (*c->p == ',') {
                c->p++;
                skip_ws(c);
                if (c->p >= c->end) return 0;
                if (stack[depth - 1] == '}') goto member;
                break; /* the array's next value */
            }
            if (*c->p != (unsigned char)stack[depth - 1]) return 0;
            c->p++;
            depth--;
        }
        continue;
    member:
        /* at an object member's key */
        const unsigned char *quote = c->p;
        if (*c->p != '"' || !scan_string(c)) return 0;
        if (found != NULL) note_string(found, quote, c);
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        c->p++;
        skip_ws(c);
        if (c->p >= c->end) return 0;
    }
}

/* The event fields read, in the order of enum's F_* values. */
static const char *const FIELD_KEYS[N_FIELDS] = {"ph",  "cat", "name", "pid", "tid",
                                                 "ts",  "dur", "id",   "args"};

/* Keys looked up by length first: a bit per key of each length (up to 15 bytes), each
 * key's bytes as two zero-padded words, compared without a library call. */
typedef struct {
    const char *const *keys;
    int count;
    size_t length[32];
    uint32_t of_length[16];
    uint64_t words[32][2];
} KeyTable;

static KeyTable FIELDS = {FIELD_KEYS, N_FIELDS, {0}, {0}, {{0}}};

/* The bytes of a key of fewer than 16 bytes as two zero-padded words (little-endian
 * order, whatever the machine's: the table's words are made the same way). */
static inline void key_words(const unsigned char *key, size_t len, uint64_t words[2]) {
    words[0] = words[1] = 0;
    for (size_t i = 0; i < len; i++) words[i >> 3] |= (uint64_t)key[i] << (8 * (i & 7));
}

/* key_words of a key with 16 readable bytes from its start: two loads, masked. */
static inline void key_words_loaded(const unsigned char *key, size_t len, uint64_t words[2]) {
#ifdef WORDS_LITTLE_ENDIAN
    uint64_t w[2];
    memcpy(w, key, 16);
    if (len < 8) {
        words[0] = len == 0 ? 0 : w[0] & (~0ULL >> (64 - 8 * len));
        words[1] = 0;
    } else {
        words[0] = w[0];
        words[1] = len == 8 ? 0 : w[1] & (~0ULL >> (64 - 8 * (len - 8)));
    }
#else
    key_words(key, len, words);
#endif
}

/* 0 when a key is too long for the table (a programming error, reported at import). */
static int init_keys(KeyTable *table) {
    for (int i = 0; i < table->count; i++) {
        table->length[i] = strlen(table->keys[i]);
        if (table->length[i] >= 16 || i >= 32) return 0;
        table->of_length[table->length[i]] |= 1u << i;
        key_words((const unsigned char *)table->keys[i], table->length[i], table->words[i]);
    }
    return 1;
}

/* Which key of the table ``key`` (its text between the quotes, within a text ending at
 * ``end``) is, or -1. */
static inline int key_of(const KeyTable *table, const unsigned char *key, size_t len,
                  const unsigned char *end) {
    if (len >= 16) return -1;
    uint32_t bits = table->of_length[len];
    if (bits == 0) return -1;
    uint64_t words[2];
    if (end - key >= 16)
        key_words_loaded(key, len, words);
    else
        key_words(key, len, words);
    for (; bits != 0; bits &= bits - 1) {
        int i = __builtin_ctz(bits);
        if (words[0] == table->words[i][0] && words[1] == table->words[i][1]) return i;
    }
    return -1;
}

/* Each field's slot among the scalars, or -1: SCALAR_FIELD read the other way (checked
 * against it at import, scalar_slots_agree). */
static const int SCALAR_SLOT[N_FIELDS] = {-1, -1, -1, 0, 1, 2, 3, 4, -1};

static inline int scalar_slot(int field) { return SCALAR_SLOT[field]; }

static int scalar_slots_agree(void) {
    int slots = 0;
    for (int f = 0; f < N_FIELDS; f++) slots += SCALAR_SLOT[f] >= 0;
    for (int i = 0; i < N_SCALARS; i++)
        if (SCALAR_SLOT[SCALAR_FIELD[i]] != i) return 0;
    return slots == N_SCALARS;
}

/* The args keys whose values are read (as kineto_columns._ARG_FIELDS names them). */
static const char *const ARG_KEYS[] = {
    "External id", "external id",     "correlation",    "device",      "stream",
    "bytes",       "size",            "flops",          "Input Dims",  "Input type",
    "Total Allocated", "Total Reserved", "Device Type", "Device Id",
};
#define N_ARGS ((int)(sizeof(ARG_KEYS) / sizeof(ARG_KEYS[0])))

static KeyTable ARGS = {ARG_KEYS, N_ARGS, {0}, {0}, {{0}}};

/* After a string of an event's args (quote: its opening quote; c past its closing one):
 * the bit of the ARG_KEYS key it equals set in *found, or FOUND_ESCAPED where it held an
 * escape. So *found tells, without reading the text again, which keys the args text holds
 * quoted ("key" as a substring): in a text without escapes a quote only opens or closes a
 * string, and a key holds neither a quote nor a backslash, so "key" is there exactly where
 * a string equals the key. Only a text with escapes must be searched. */
static void note_string(uint32_t *found, const unsigned char *quote, const Cursor *c) {
    if (c->escaped) {
        *found |= FOUND_ESCAPED;
        return;
    }
    int arg = key_of(&ARGS, quote + 1, (size_t)(c->p - 1 - (quote + 1)), c->end);
    if (arg >= 0) *found |= 1u << arg;
}

/* At the opening brace of an event's args: past the closing one, the known keys' spans,
 * kinds and integer values written, and every string of the args noted in *found; 0 on
 * invalid or unsupported text (a key with escapes, a known key named twice). */
static int scan_args(Cursor *c, const unsigned char *data, int64_t *span, int64_t *value,
                     uint8_t *kind, uint32_t *found) {
    c->p++;
    skip_ws(c);
    if (c->p >= c->end) return 0;
    if (*c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        if (*c->p != '"') return 0;
        const unsigned char *key = c->p + 1;
        if (!scan_string(c) || c->escaped) return 0;
        int arg = key_of(&ARGS, key, (size_t)(c->p - 1 - key), c->end);
        if (arg >= 0) *found |= 1u << arg;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return 0;
        c->p++;
        skip_ws(c);
        const unsigned char *start = c->p;
        int k = 0;
        int64_t v = 0;
        if (!scan_value(c, &k, &v, found)) return 0;
        if (arg >= 0) {
            if (span[2 * arg] >= 0) return 0; /* named twice */
            span[2 * arg] = start - data;
            span[2 * arg + 1] = c->p - data;
            kind[arg] = (uint8_t)k;
            value[arg] = (k == K_INT) ? v : 0;
        }
        int next = next_element(c, '}');
        if (next == 1) continue;
        if (next == 0) return 0;
        c->p++;
        return 1;
    }
}

/* The events of payload; their count, or UNSUPPORTED / TOO_MANY. */
static Py_ssize_t scan_payload(const unsigned char *data, Py_ssize_t size, int64_t *spans,
                               int64_t *values, uint8_t *kinds, int64_t *arg_spans,
                               int64_t *arg_values, uint8_t *arg_kinds, uint32_t *arg_found,
                               Py_ssize_t capacity, uint8_t *high) {
    Cursor c = {data, data + size, 0, 0};
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '[') return UNSUPPORTED;
    c.p++;
    skip_ws(&c);
    if (c.p >= c.end) return UNSUPPORTED;
    Py_ssize_t n = 0;
    if (*c.p == ']') {
        c.p++;
        goto done;
    }
    for (;;) {
        if (*c.p != '{') return UNSUPPORTED;
        if (n >= capacity) return TOO_MANY;
        int64_t *span = spans + n * N_SPANS;
        int64_t *value = values + n * N_SCALARS;
        uint8_t *kind = kinds + n * N_SCALARS;
        /* spans -1 (every byte 0xff), values 0, kinds K_ABSENT (0) */
        memset(span, 0xff, sizeof(int64_t) * N_SPANS);
        memset(value, 0, sizeof(int64_t) * N_SCALARS);
        memset(kind, K_ABSENT, N_SCALARS);
        int64_t *arg_span = arg_spans + n * 2 * N_ARGS;
        int64_t *arg_value = arg_values + n * N_ARGS;
        uint8_t *arg_kind = arg_kinds + n * N_ARGS;
        uint32_t *found = arg_found + n;
        *found = 0;
        memset(arg_span, 0xff, sizeof(int64_t) * 2 * N_ARGS);
        memset(arg_value, 0, sizeof(int64_t) * N_ARGS);
        memset(arg_kind, K_ABSENT, N_ARGS);
        span[0] = c.p - data;
        c.p++;
        skip_ws(&c);
        if (c.p >= c.end) return UNSUPPORTED;
        if (*c.p != '}') {
            for (;;) {
                if (*c.p != '"') return UNSUPPORTED;
                const unsigned char *key = c.p + 1;
                if (!scan_string(&c)) return UNSUPPORTED;
                if (c.escaped) return UNSUPPORTED;
                int field = key_of(&FIELDS, key, (size_t)(c.p - 1 - key), c.end);
                skip_ws(&c);
                if (c.p >= c.end || *c.p != ':') return UNSUPPORTED;
                c.p++;
                skip_ws(&c);
                const unsigned char *start = c.p;
                int k = 0;
                int64_t v = 0;
                if (field == F_ARGS && c.p < c.end && *c.p == '{') {
                    k = K_NESTED;
                    if (!scan_args(&c, data, arg_span, arg_value, arg_kind, found))
                        return UNSUPPORTED;
                } else if (!scan_value(&c, &k, &v, field == F_ARGS ? found : NULL)) {
                    return UNSUPPORTED;
                }
                if (field >= 0) {
                    int64_t *field_span = span + 2 + 2 * field;
                    if (field_span[0] >= 0) return UNSUPPORTED; /* named twice */
                    if (k == K_STRING && c.escaped && field != F_ARGS) return UNSUPPORTED;
                    field_span[0] = start - data;
                    field_span[1] = c.p - data;
                    int slot = scalar_slot(field);
                    if (slot >= 0) {
                        kind[slot] = (uint8_t)k;
                        value[slot] = (k == K_INT) ? v : 0;
                    } else if (field != F_ARGS && k != K_STRING) {
                        /* ph, cat and name are strings: anything else decodes the general way */
                        return UNSUPPORTED;
                    }
                }
                int next = next_element(&c, '}');
                if (next == 1) continue;
                if (next == 2) break;
                return UNSUPPORTED;
            }
        }
        c.p++; /* the closing brace */
        span[1] = c.p - data;
        n++;
        int next = next_element(&c, ']');
        if (next == 0) return UNSUPPORTED;
        if (next == 2) {
            c.p++;
            break;
        }
    }
done:
    skip_ws(&c);
    *high = (c.high & UINT64_C(0x8080808080808080)) != 0;
    return c.p == c.end ? n : UNSUPPORTED;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    enum { N_OBJECTS = 9 };
    PyObject *objects[N_OBJECTS];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &objects[5], &objects[6], &objects[7], &objects[8]))
        return NULL;
    /* payload; spans, values, kinds; arg spans, arg values, arg kinds, arg found; high */
    Py_buffer views[N_OBJECTS];
    int held = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(objects[0], &views[0], PyBUF_C_CONTIGUOUS) < 0) return NULL;
    held = 1;
    for (; held < N_OBJECTS; held++)
        if (PyObject_GetBuffer(objects[held], &views[held], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) <
            0)
            goto out;
    Py_ssize_t capacity = views[1].len / (Py_ssize_t)(N_SPANS * sizeof(int64_t));
    const Py_ssize_t row_bytes[N_OBJECTS] = {
        0,
        N_SPANS * (Py_ssize_t)sizeof(int64_t),
        N_SCALARS * (Py_ssize_t)sizeof(int64_t),
        N_SCALARS,
        2 * N_ARGS * (Py_ssize_t)sizeof(int64_t),
        N_ARGS * (Py_ssize_t)sizeof(int64_t),
        N_ARGS,
        (Py_ssize_t)sizeof(uint32_t),
        0,
    };
    if (views[8].len < 1) {
        PyErr_SetString(PyExc_ValueError, "scan: no byte to tell of bytes >= 0x80");
        goto out;
    }
    for (int i = 2; i < N_OBJECTS; i++)
        if (views[i].len < capacity * row_bytes[i]) {
            PyErr_SetString(PyExc_ValueError, "an output array holds fewer rows than spans");
            goto out;
        }
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS;
    n = scan_payload((const unsigned char *)views[0].buf, views[0].len, (int64_t *)views[1].buf,
                     (int64_t *)views[2].buf, (uint8_t *)views[3].buf, (int64_t *)views[4].buf,
                     (int64_t *)views[5].buf, (uint8_t *)views[6].buf, (uint32_t *)views[7].buf,
                     capacity, (uint8_t *)views[8].buf);
    Py_END_ALLOW_THREADS;
    result = PyLong_FromSsize_t(n);
out:
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

/* The C-contiguous buffers of objects[0:n], read-only; -1 (those held released) on failure. */
static int get_buffers(PyObject *const *objects, Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(objects[i], &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            while (i-- > 0) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void release_buffers(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* The bytes of the spans starts[i]:ends[i] of payload (int64 arrays of one length), fill_len
 * for each span starting below 0; -1 with ValueError set where the arrays or a span are
 * not so. */
static Py_ssize_t spans_bytes(const Py_buffer *payload, const Py_buffer *starts,
                              const Py_buffer *ends, Py_ssize_t fill_len) {
    if (ends->len != starts->len || starts->len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        return -1;
    }
    Py_ssize_t n = starts->len / (Py_ssize_t)sizeof(int64_t), total = 0;
    const int64_t *s = (const int64_t *)starts->buf;
    const int64_t *e = (const int64_t *)ends->buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0) {
            total += fill_len;
            continue;
        }
        if (e[i] < s[i] || e[i] > payload->len) {
            PyErr_SetString(PyExc_ValueError, "a span lies outside the payload");
            return -1;
        }
        total += (Py_ssize_t)(e[i] - s[i]);
    }
    return total;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *payload_obj, *starts_obj, *ends_obj;
    const char *sep, *prefix, *suffix, *fill;
    Py_ssize_t sep_len, prefix_len, suffix_len, fill_len;
    if (!PyArg_ParseTuple(args, "OOOy#y#y#y#", &payload_obj, &starts_obj, &ends_obj, &sep,
                          &sep_len, &prefix, &prefix_len, &suffix, &suffix_len, &fill, &fill_len))
        return NULL;
    PyObject *const objects[3] = {payload_obj, starts_obj, ends_obj};
    Py_buffer views[3];
    if (get_buffers(objects, views, 3) < 0) return NULL;
    Py_buffer payload = views[0], starts = views[1], ends = views[2];
    PyObject *result = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = (const int64_t *)starts.buf;
    const int64_t *e = (const int64_t *)ends.buf;
    Py_ssize_t total = spans_bytes(&payload, &starts, &ends, fill_len);
    if (total < 0) goto out;
    total += prefix_len + suffix_len + (n > 0 ? (n - 1) * sep_len : 0);
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto out;
    {
        char *out = PyBytes_AS_STRING(result);
        const char *data = (const char *)payload.buf;
        memcpy(out, prefix, (size_t)prefix_len);
        out += prefix_len;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i > 0) {
                memcpy(out, sep, (size_t)sep_len);
                out += sep_len;
            }
            if (s[i] < 0) {
                memcpy(out, fill, (size_t)fill_len);
                out += fill_len;
                continue;
            }
            memcpy(out, data + s[i], (size_t)(e[i] - s[i]));
            out += e[i] - s[i];
        }
        memcpy(out, suffix, (size_t)suffix_len);
    }
out:
    release_buffers(views, 3);
    return result;
}

/* A text's hash: its bytes eight at a time, multiplied and folded. */
static inline uint64_t text_hash(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t tail = 0;
    for (int k = 0; i + k < n; k++) tail |= (uint64_t)p[i + k] << (8 * k);
    h = (h ^ tail) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

/* encode_spans(payload, starts, ends): the string values whose quoted spans (int64 starts
 * and ends, the quotes included; a start below 0: absent, read as "") are given, encoded as
 * pyarrow.compute.dictionary_encode encodes their texts: (each span's int32 code, the
 * distinct texts' int32 offsets and their bytes back to back, in order of first
 * appearance). */
static PyObject *encode_spans(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *payload_obj, *starts_obj, *ends_obj;
    if (!PyArg_ParseTuple(args, "OOO", &payload_obj, &starts_obj, &ends_obj)) return NULL;
    PyObject *const objects[3] = {payload_obj, starts_obj, ends_obj};
    Py_buffer views[3];
    if (get_buffers(objects, views, 3) < 0) return NULL;
    Py_buffer payload = views[0], starts = views[1], ends = views[2];
    PyObject *result = NULL, *codes_out = NULL, *offsets_out = NULL, *data_out = NULL;
    int32_t *codes = NULL, *slots = NULL, *first = NULL;
    uint64_t *hashes = NULL;
    if (spans_bytes(&payload, &starts, &ends, 0) < 0) goto out;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = (const int64_t *)starts.buf;
    const int64_t *e = (const int64_t *)ends.buf;
    const unsigned char *data = (const unsigned char *)payload.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] >= 0 && e[i] - s[i] < 2) {
            PyErr_SetString(PyExc_ValueError, "a span is too short to hold its quotes");
            goto out;
        }
    size_t capacity = 16;
    while (capacity < 2 * (size_t)n + 2) capacity <<= 1;
    codes = PyMem_RawMalloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    first = PyMem_RawMalloc(sizeof(int32_t) * (size_t)(n + 1));
    hashes = PyMem_RawMalloc(sizeof(uint64_t) * (size_t)(n + 1));
    slots = PyMem_RawMalloc(sizeof(int32_t) * capacity);
    if (codes == NULL || first == NULL || hashes == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    Py_ssize_t distinct = 0, total = 0;
    Py_BEGIN_ALLOW_THREADS;
    memset(slots, 0xff, sizeof(int32_t) * capacity);
    const size_t mask = capacity - 1;
    const unsigned char *last_text = NULL;
    Py_ssize_t last_len = -1;
    int32_t last_code = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *text = s[i] >= 0 ? data + s[i] + 1 : data;
        Py_ssize_t len = s[i] >= 0 ? e[i] - s[i] - 2 : 0;
        /* rows come in runs of one text (a thread's categories, a loop's kernels) */
        if (len == last_len && memcmp(text, last_text, (size_t)len) == 0) {
            codes[i] = last_code;
            continue;
        }
        uint64_t h = text_hash(text, len);
        size_t at = (size_t)h & mask;
        int32_t code;
        for (;;) {
            code = slots[at];
            if (code < 0) {
                code = (int32_t)distinct++;
                slots[at] = code;
                first[code] = (int32_t)i;
                hashes[code] = h;
                total += len;
                break;
            }
            Py_ssize_t row = first[code];
            const unsigned char *seen = s[row] >= 0 ? data + s[row] + 1 : data;
            Py_ssize_t seen_len = s[row] >= 0 ? e[row] - s[row] - 2 : 0;
            if (hashes[code] == h && seen_len == len && memcmp(seen, text, (size_t)len) == 0)
                break;
            at = (at + 1) & mask;
        }
        codes[i] = last_code = code;
        last_text = text;
        last_len = len;
    }
    Py_END_ALLOW_THREADS;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the distinct texts pass int32 offsets");
        goto out;
    }
    codes_out = PyBytes_FromStringAndSize((const char *)codes, (Py_ssize_t)sizeof(int32_t) * n);
    offsets_out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int32_t) * (distinct + 1));
    data_out = PyBytes_FromStringAndSize(NULL, total);
    if (codes_out == NULL || offsets_out == NULL || data_out == NULL) goto out;
    {
        int32_t *offsets = (int32_t *)PyBytes_AS_STRING(offsets_out);
        char *dst = PyBytes_AS_STRING(data_out);
        int32_t at = 0;
        offsets[0] = 0;
        for (Py_ssize_t d = 0; d < distinct; d++) {
            Py_ssize_t row = first[d];
            if (s[row] >= 0) {
                Py_ssize_t len = e[row] - s[row] - 2;
                memcpy(dst + at, data + s[row] + 1, (size_t)len);
                at += (int32_t)len;
            }
            offsets[d + 1] = at;
        }
    }
    result = PyTuple_Pack(3, codes_out, offsets_out, data_out);
out:
    Py_XDECREF(codes_out);
    Py_XDECREF(offsets_out);
    Py_XDECREF(data_out);
    PyMem_RawFree(codes);
    PyMem_RawFree(first);
    PyMem_RawFree(hashes);
    PyMem_RawFree(slots);
    release_buffers(views, 3);
    return result;
}

/* ``pattern`` (m bytes, starting with a line break) removed from text[0:n] in place, left
 * to right, as bytes.replace(pattern, b"") removes it; the new length. */
static size_t remove_breaks(char *text, size_t n, const char *pattern, size_t m) {
    size_t r = 0, w = 0;
    for (;;) {
        const char *at = memchr(text + r, '\n', n - r);
        size_t stop = at == NULL ? n : (size_t)(at - text);
        int match = at != NULL && stop + m <= n && memcmp(text + stop, pattern, m) == 0;
        size_t keep = stop - r + (at != NULL && !match ? 1 : 0);
        memmove(text + w, text + r, keep);
        w += keep;
        if (at == NULL) return w;
        r = match ? stop + m : stop + 1;
    }
}

/* text[0:n] copied to dst with its line breaks removed as the three remove_breaks passes
 * remove them, in one pass: each break with the six spaces after it where there are six, else
 * with the four after it where there are four, else alone. The same where no two breaks have
 * only spaces between them (a removal then never joins a break to spaces that make a new
 * match: pretty-printed JSON has no blank line); -1 otherwise, for the three passes. */
static Py_ssize_t copy_without_breaks(char *dst, const char *text, size_t n) {
    size_t r = 0, w = 0;
    for (;;) {
        const char *at = memchr(text + r, '\n', n - r);
        size_t stop = at == NULL ? n : (size_t)(at - text);
        memcpy(dst + w, text + r, stop - r);
        w += stop - r;
        if (at == NULL) return (Py_ssize_t)w;
        size_t after = stop + 1, spaces = 0;
        while (after + spaces < n && text[after + spaces] == ' ') spaces++;
        if (after + spaces < n && text[after + spaces] == '\n') return -1;
        r = after + (spaces >= 6 ? 6 : spaces >= 4 ? 4 : 0);
    }
}

static PyObject *compact(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *payload_obj, *starts_obj, *ends_obj;
    const char *fill;
    Py_ssize_t fill_len;
    if (!PyArg_ParseTuple(args, "OOOy#", &payload_obj, &starts_obj, &ends_obj, &fill, &fill_len))
        return NULL;
    PyObject *const objects[3] = {payload_obj, starts_obj, ends_obj};
    Py_buffer views[3];
    if (get_buffers(objects, views, 3) < 0) return NULL;
    Py_buffer payload = views[0], starts = views[1], ends = views[2];
    PyObject *data = NULL, *lengths = NULL, *result = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *s = (const int64_t *)starts.buf;
    const int64_t *e = (const int64_t *)ends.buf;
    Py_ssize_t total = spans_bytes(&payload, &starts, &ends, fill_len);
    if (total < 0) goto out;
    data = PyBytes_FromStringAndSize(NULL, total);
    lengths = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL || lengths == NULL) goto out;
    char *begin = PyBytes_AS_STRING(data), *dst = begin;
    int64_t *length = (int64_t *)PyBytes_AS_STRING(lengths);
    const char *src = (const char *)payload.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = s[i] < 0 ? (size_t)fill_len : (size_t)(e[i] - s[i]);
        const char *text = s[i] < 0 ? fill : src + s[i];
        Py_ssize_t kept = copy_without_breaks(dst, text, len);
        if (kept >= 0) {
            len = (size_t)kept;
        } else {
            memcpy(dst, text, len);
            len = remove_breaks(dst, len, "\n      ", 7);
            len = remove_breaks(dst, len, "\n    ", 5);
            len = remove_breaks(dst, len, "\n", 1);
        }
        length[i] = (int64_t)len;
        dst += len;
    }
    Py_END_ALLOW_THREADS;
    if (_PyBytes_Resize(&data, dst - begin) < 0) goto out; /* data is NULL then */
    result = PyTuple_Pack(2, data, lengths);
out:
    Py_XDECREF(data);
    Py_XDECREF(lengths);
    release_buffers(views, 3);
    return result;
}

/* The number of texts of a string table (int32 offsets into data_len bytes of text, as Arrow
 * lays it out) when every text lies within the data; -1 with a ValueError otherwise. */
static Py_ssize_t table_texts(const Py_buffer *offsets, Py_ssize_t data_len) {
    const int32_t *o = (const int32_t *)offsets->buf;
    Py_ssize_t m = offsets->len / (Py_ssize_t)sizeof(int32_t) - 1;
    if (offsets->len % (Py_ssize_t)sizeof(int32_t) != 0 || m < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets must be an int32 array");
        return -1;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        if (o[k] < 0 || o[k + 1] < o[k] || o[k + 1] > data_len) {
            PyErr_SetString(PyExc_ValueError, "the offsets do not lie within the data");
            return -1;
        }
    }
    return m;
}

static PyObject *join(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *offsets_obj, *codes_obj;
    if (!PyArg_ParseTuple(args, "OOO", &data_obj, &offsets_obj, &codes_obj)) return NULL;
    PyObject *const objects[3] = {data_obj, offsets_obj, codes_obj};
    Py_buffer views[3];
    if (get_buffers(objects, views, 3) < 0) return NULL;
    Py_buffer data = views[0], offsets = views[1], codes = views[2];
    PyObject *result = NULL;
    const int32_t *o = (const int32_t *)offsets.buf;
    const int32_t *c = (const int32_t *)codes.buf;
    Py_ssize_t n = codes.len / (Py_ssize_t)sizeof(int32_t);
    if (codes.len % (Py_ssize_t)sizeof(int32_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "codes must be an int32 array");
        goto out;
    }
    Py_ssize_t m = table_texts(&offsets, data.len); /* texts in the table */
    if (m < 0) goto out;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < 0) continue;
        if (c[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "a code lies beyond the table");
            goto out;
        }
        total += (Py_ssize_t)(o[c[i] + 1] - o[c[i]]);
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto out;
    {
        char *dst = PyBytes_AS_STRING(result);
        const char *src = (const char *)data.buf;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (c[i] < 0) continue;
            size_t len = (size_t)(o[c[i] + 1] - o[c[i]]);
            memcpy(dst, src + o[c[i]], len);
            dst += len;
        }
        Py_END_ALLOW_THREADS;
    }
out:
    release_buffers(views, 3);
    return result;
}

/* The spans first..stop-1 of copy_spans, copied back to back from dst. */
typedef struct {
    const Py_buffer *views;
    const int32_t *src;
    const int64_t *start;
    const int64_t *length;
    Py_ssize_t first, stop;
    char *dst;
} SpanCopy;

static void *copy_span_range(void *arg) {
    const SpanCopy *job = (const SpanCopy *)arg;
    char *dst = job->dst;
    for (Py_ssize_t i = job->first; i < job->stop; i++) {
        if (job->length[i] == 0) continue;
        memcpy(dst, (const char *)job->views[job->src[i]].buf + job->start[i],
               (size_t)job->length[i]);
        dst += job->length[i];
    }
    return NULL;
}

/* At least this many bytes to copy, and copy_spans copies the second half of them on a
 * thread of its own while the caller copies the first. The copy may write into pages the
 * system has to find (a text piece's buffer the first time, or a file's map): then most of
 * its time is the system's, which two threads spend at once (bench/README.md, "Growth"). */
#define COPY_SPLIT_BYTES ((Py_ssize_t)8 << 20)

/* copy_spans(sources, source, starts, lengths, out): span i (source[i], an index into the
 * sequence sources of buffers; starts[i] and lengths[i], int64) copied into the writable
 * buffer out, back to back from its start; a span of length 0 reads nothing. ValueError
 * where a span lies outside its source or the spans need more than out holds. From
 * COPY_SPLIT_BYTES on, two threads copy (the bytes written are the same). */
static PyObject *copy_spans(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sources_obj, *source_obj, *starts_obj, *lengths_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOOO", &sources_obj, &source_obj, &starts_obj, &lengths_obj,
                          &out_obj))
        return NULL;
    PyObject *sources = PySequence_Fast(sources_obj, "sources must be a sequence of buffers");
    if (sources == NULL) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(sources);
    Py_buffer *views = PyMem_Calloc((size_t)(m > 0 ? m : 1), sizeof(Py_buffer));
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    Py_buffer arrays[3], out;
    int have_arrays = 0, have_out = 0;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < m; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(sources, got), &views[got],
                               PyBUF_C_CONTIGUOUS) < 0)
            goto done;
    }
    {
        PyObject *const objects[3] = {source_obj, starts_obj, lengths_obj};
        if (get_buffers(objects, arrays, 3) < 0) goto done;
        have_arrays = 1;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    have_out = 1;
    Py_ssize_t n = arrays[1].len / (Py_ssize_t)sizeof(int64_t);
    if (arrays[1].len % (Py_ssize_t)sizeof(int64_t) != 0 ||
        arrays[2].len != arrays[1].len ||
        arrays[0].len != n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError,
                        "source must be int32, starts and lengths int64, all of one length");
        goto done;
    }
    const int32_t *src = (const int32_t *)arrays[0].buf;
    const int64_t *start = (const int64_t *)arrays[1].buf;
    const int64_t *length = (const int64_t *)arrays[2].buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (length[i] == 0) continue;
        if (src[i] < 0 || src[i] >= m || start[i] < 0 || length[i] < 0 ||
            start[i] > views[src[i]].len - length[i]) {
            PyErr_SetString(PyExc_ValueError, "a span lies outside its source");
            goto done;
        }
        total += (Py_ssize_t)length[i];
    }
    if (total > out.len) {
        PyErr_SetString(PyExc_ValueError, "the spans need more bytes than out holds");
        goto done;
    }
    {
        SpanCopy whole = {views, src, start, length, 0, n, (char *)out.buf};
        Py_BEGIN_ALLOW_THREADS;
        int split = 0;
#ifndef _WIN32
        if (total >= COPY_SPLIT_BYTES) {
            /* the second half from the first span that starts at or past half the bytes */
            Py_ssize_t at = 0, before = 0;
            while (at < n && before < total / 2) before += (Py_ssize_t)length[at++];
            SpanCopy first = whole, second = whole;
            first.stop = at;
            second.first = at;
            second.dst = (char *)out.buf + before;
            pthread_t helper;
            if (pthread_create(&helper, NULL, copy_span_range, &second) == 0) {
                copy_span_range(&first);
                pthread_join(helper, NULL);
                split = 1;
            }
        }
#endif
        if (!split) copy_span_range(&whole);
        Py_END_ALLOW_THREADS;
    }
    result = PyLong_FromSsize_t(total);
done:
    if (have_out) PyBuffer_Release(&out);
    if (have_arrays) release_buffers(arrays, 3);
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(sources);
    return result;
}

static PyObject *digits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj;
    const char *prefix, *suffix;
    Py_ssize_t prefix_len, suffix_len;
    if (!PyArg_ParseTuple(args, "Oy#y#", &values_obj, &prefix, &prefix_len, &suffix, &suffix_len))
        return NULL;
    Py_buffer values;
    if (PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *data = NULL, *offsets = NULL, *result = NULL;
    if (values.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "values must be an int64 array");
        goto out;
    }
    Py_ssize_t n = values.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t widest = prefix_len + 20 + suffix_len;
    if (n > 0 && widest > (INT32_MAX - 1) / n) {
        PyErr_SetString(PyExc_ValueError, "the texts would pass int32 offsets");
        goto out;
    }
    data = PyBytes_FromStringAndSize(NULL, n * widest);
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    if (data == NULL || offsets == NULL) goto out;
    const int64_t *v = (const int64_t *)values.buf;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offsets);
    char *begin = PyBytes_AS_STRING(data), *dst = begin;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        o[i] = (int32_t)(dst - begin);
        memcpy(dst, prefix, (size_t)prefix_len);
        dst = put_decimal(dst + prefix_len, v[i]);
        memcpy(dst, suffix, (size_t)suffix_len);
        dst += suffix_len;
    }
    o[n] = (int32_t)(dst - begin);
    Py_END_ALLOW_THREADS;
    if (_PyBytes_Resize(&data, dst - begin) < 0) goto out; /* data is NULL then */
    result = PyTuple_Pack(2, data, offsets);
out:
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    PyBuffer_Release(&values);
    return result;
}

/* The keys of Kineto's per-task ids, cut from the front of a kernel's args by cut_ids. */
static const char *const TASK_ID_KEYS[] = {"External id", "queued",      "device",
                                           "context",     "correlation", "stream"};
#define N_TASK_ID_KEYS (sizeof(TASK_ID_KEYS) / sizeof(TASK_ID_KEYS[0]))

/* Where the pair `"key": integer,` (a key of TASK_ID_KEYS, a space allowed after the colon
 * and after the comma, the integer -?(0|[1-9][0-9]{0,17})) starting at t[p] ends; -1 when
 * none starts there. Every step has one way to go, as the regular expression's. */
static Py_ssize_t task_id_pair(const char *t, Py_ssize_t p, Py_ssize_t n) {
    if (p >= n || t[p] != '"') return -1;
    p++;
    Py_ssize_t after = -1;
    for (size_t k = 0; k < N_TASK_ID_KEYS && after < 0; k++) {
        Py_ssize_t len = (Py_ssize_t)strlen(TASK_ID_KEYS[k]);
        if (p + len < n && memcmp(t + p, TASK_ID_KEYS[k], (size_t)len) == 0 && t[p + len] == '"')
            after = p + len + 1;
    }
    if (after < 0 || after >= n || t[after] != ':') return -1;
    p = after + 1;
    if (p < n && t[p] == ' ') p++;
    if (p < n && t[p] == '-') p++;
    if (p < n && t[p] == '0') {
        p++;
    } else if (p < n && t[p] >= '1' && t[p] <= '9') {
        p++;
        for (int d = 0; d < 17 && p < n && t[p] >= '0' && t[p] <= '9'; d++) p++;
    } else {
        return -1;
    }
    if (p >= n || t[p] != ',') return -1;
    p++;
    if (p < n && t[p] == ' ') p++;
    return p;
}

static PyObject *cut_ids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *offsets_obj;
    if (!PyArg_ParseTuple(args, "OO", &data_obj, &offsets_obj)) return NULL;
    PyObject *const objects[2] = {data_obj, offsets_obj};
    Py_buffer views[2];
    if (get_buffers(objects, views, 2) < 0) return NULL;
    Py_buffer data = views[0], offsets = views[1];
    PyObject *out_data = NULL, *out_offsets = NULL, *result = NULL;
    const int32_t *o = (const int32_t *)offsets.buf;
    Py_ssize_t n = table_texts(&offsets, data.len); /* texts in the table */
    if (n < 0) goto out;
    /* a cut text is never longer than its text */
    out_data = PyBytes_FromStringAndSize(NULL, n > 0 ? (Py_ssize_t)(o[n] - o[0]) : 0);
    out_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    if (out_data == NULL || out_offsets == NULL) goto out;
    char *begin = PyBytes_AS_STRING(out_data), *dst = begin;
    int32_t *w = (int32_t *)PyBytes_AS_STRING(out_offsets);
    const char *src = (const char *)data.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *t = src + o[i];
        Py_ssize_t len = (Py_ssize_t)(o[i + 1] - o[i]), from = 0;
        w[i] = (int32_t)(dst - begin);
        if (len > 0 && t[0] == '{') {
            Py_ssize_t p = 1, next;
            while ((next = task_id_pair(t, p, len)) >= 0) p = next;
            if (p > 1) {
                *dst++ = '{';
                from = p;
            }
        }
        memcpy(dst, t + from, (size_t)(len - from));
        dst += len - from;
    }
    w[n] = (int32_t)(dst - begin);
    Py_END_ALLOW_THREADS;
    if (_PyBytes_Resize(&out_data, dst - begin) < 0) goto out; /* out_data is NULL then */
    result = PyTuple_Pack(2, out_data, out_offsets);
out:
    Py_XDECREF(out_data);
    Py_XDECREF(out_offsets);
    release_buffers(views, 2);
    return result;
}

/* The names named_keys looks for between quotes, beside any name ending in "_ratio". */
static const char *const NAMED_KEYS[] = {"op_type", "output_shapes", "output_dtypes",
                                         "input_formats"};
#define N_NAMED_KEYS (sizeof(NAMED_KEYS) / sizeof(NAMED_KEYS[0]))

static inline int name_byte(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* Whether t[0:n] holds `"name"`, name one of NAMED_KEYS or [a-z0-9_]+_ratio. Every such
 * name holds an underscore, which other args (CUDA's) seldom do: the search goes from
 * underscore to underscore. An underscore's name is the run of name bytes around it; it is a
 * match where a quote comes right before the run and right after it (the quotes are not name
 * bytes, so the run is the longest after the quote: the name a scan from that quote reads). */
static int holds_named_key(const char *t, Py_ssize_t n) {
    const char *end = t + n, *u = t;
    while ((u = memchr(u, '_', (size_t)(end - u))) != NULL) {
        const char *name = u, *r = u + 1;
        while (name > t && name_byte((unsigned char)name[-1])) name--;
        while (r < end && name_byte((unsigned char)*r)) r++;
        if (name > t && name[-1] == '"' && r < end && *r == '"') {
            size_t len = (size_t)(r - name);
            if (len >= 7 && memcmp(r - 6, "_ratio", 6) == 0) return 1;
            for (size_t k = 0; k < N_NAMED_KEYS; k++) {
                if (len == strlen(NAMED_KEYS[k]) && memcmp(name, NAMED_KEYS[k], len) == 0)
                    return 1;
            }
        }
        u = r; /* the run's other underscores are the same name */
    }
    return 0;
}

static PyObject *named_keys(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_obj, *offsets_obj, *rows_obj;
    if (!PyArg_ParseTuple(args, "OOO", &data_obj, &offsets_obj, &rows_obj)) return NULL;
    PyObject *const objects[3] = {data_obj, offsets_obj, rows_obj};
    Py_buffer views[3];
    if (get_buffers(objects, views, 3) < 0) return NULL;
    Py_buffer data = views[0], offsets = views[1], rows = views[2];
    PyObject *result = NULL;
    const int32_t *o = (const int32_t *)offsets.buf;
    const int64_t *w = (const int64_t *)rows.buf;
    Py_ssize_t n = rows.len / (Py_ssize_t)sizeof(int64_t);
    if (rows.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "rows must be an int64 array");
        goto out;
    }
    Py_ssize_t m = table_texts(&offsets, data.len); /* texts in the table */
    if (m < 0) goto out;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (w[i] < 0 || w[i] >= m) {
            PyErr_SetString(PyExc_ValueError, "a row lies beyond the table");
            goto out;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, n);
    if (result == NULL) goto out;
    {
        char *hit = PyBytes_AS_STRING(result);
        const char *src = (const char *)data.buf;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t i = 0; i < n; i++)
            hit[i] = (char)holds_named_key(src + o[w[i]], (Py_ssize_t)(o[w[i] + 1] - o[w[i]]));
        Py_END_ALLOW_THREADS;
    }
out:
    release_buffers(views, 3);
    return result;
}

/* A buffer's element kind: 'i' (a signed integer), 'f' (float64) or 0 (neither). */
static char number_kind(const Py_buffer *view) {
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (f[1] != '\0') return 0;
    switch (*f) {
    case 'b': case 'h': case 'i': case 'l': case 'q':
        return 'i';
    case 'd':
        return view->itemsize == 8 ? 'f' : 0;
    default:
        return 0;
    }
}

static inline int64_t int_at(const char *p, Py_ssize_t width, Py_ssize_t i) {
    switch (width) {
    case 1: return ((const int8_t *)p)[i];
    case 2: return ((const int16_t *)p)[i];
    case 4: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj, *position_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO", &values_obj, &position_obj, &out_obj)) return NULL;
    Py_buffer values, position, out;
    if (PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(position_obj, &position, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&values);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
        0) {
        PyBuffer_Release(&position);
        PyBuffer_Release(&values);
        return NULL;
    }
    PyObject *result = NULL;
    char vk = number_kind(&values), ok = number_kind(&out);
    Py_ssize_t vw = values.itemsize, ow = out.itemsize;
    Py_ssize_t n = vw > 0 ? values.len / vw : 0, size = ow > 0 ? out.len / ow : 0;
    if (number_kind(&position) != 'i' || position.itemsize != 8 ||
        position.len / 8 != n || vk == 0 || vk != ok || (vk == 'i' && ow < vw) ||
        (ow != 1 && ow != 2 && ow != 4 && ow != 8)) {
        PyErr_SetString(PyExc_TypeError,
                        "scatter takes integers into integers as wide or wider, or float64 into "
                        "float64, and an int64 position per value");
        goto done;
    }
    const int64_t *at = (const int64_t *)position.buf;
    int outside = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((uint64_t)at[i] >= (uint64_t)size) {
            outside = 1;
            break;
        }
    }
    if (!outside) {
        const char *v = (const char *)values.buf;
        char *o = (char *)out.buf;
        if (vk == 'f') {
            for (Py_ssize_t i = 0; i < n; i++) ((double *)o)[at[i]] = ((const double *)v)[i];
        } else if (ow == 8 && vw == 8) {
            for (Py_ssize_t i = 0; i < n; i++) ((int64_t *)o)[at[i]] = ((const int64_t *)v)[i];
        } else if (ow == 8 && vw == 4) {
            for (Py_ssize_t i = 0; i < n; i++) ((int64_t *)o)[at[i]] = ((const int32_t *)v)[i];
        } else if (ow == 1) {
            for (Py_ssize_t i = 0; i < n; i++) ((int8_t *)o)[at[i]] = ((const int8_t *)v)[i];
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t x = int_at(v, vw, i);
                switch (ow) {
                case 2: ((int16_t *)o)[at[i]] = (int16_t)x; break;
                case 4: ((int32_t *)o)[at[i]] = (int32_t)x; break;
                default: ((int64_t *)o)[at[i]] = x; break;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS;
    if (outside) {
        PyErr_SetString(PyExc_IndexError, "a position lies outside out");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&position);
    PyBuffer_Release(&values);
    return result;
}

static PyObject *phase_codes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objects[0], &objects[1], &objects[2], &objects[3]))
        return NULL;
    /* payload, spans (as scan writes them), the int64 code of each byte, out (int64) */
    Py_buffer views[4];
    int held = 0;
    PyObject *result = NULL;
    for (; held < 4; held++)
        if (PyObject_GetBuffer(objects[held], &views[held],
                               held == 3 ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                         : PyBUF_C_CONTIGUOUS) < 0)
            goto out;
    Py_ssize_t n = views[3].len / (Py_ssize_t)sizeof(int64_t);
    if (views[1].len < n * N_SPANS * (Py_ssize_t)sizeof(int64_t) ||
        views[2].len != 256 * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError,
                         "phase_codes: spans for fewer events than out, or no code per byte");
        goto out;
    }
    const unsigned char *data = (const unsigned char *)views[0].buf;
    Py_ssize_t size = views[0].len;
    const int64_t *spans = (const int64_t *)views[1].buf, *code = (const int64_t *)views[2].buf;
    int64_t *codes = (int64_t *)views[3].buf;
    int outside = 0;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *ph = spans + i * N_SPANS + 2 + 2 * F_PH;
        codes[i] = -1;
        if (ph[0] < 0 || ph[1] - ph[0] != 3) continue; /* absent, or not one character */
        if (ph[1] > size) {
            outside = 1;
            break;
        }
        codes[i] = code[data[ph[0] + 1]];
    }
    Py_END_ALLOW_THREADS;
    if (outside)
        PyErr_SetString(PyExc_ValueError, "phase_codes: a span outside the payload");
    else
        result = Py_NewRef(Py_None);
out:
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(payload, spans, values, kinds, arg_spans, arg_values, arg_kinds, arg_found, high) -> "
     "events found, -1 when the payload needs the general decoder, -2 when spans holds too few "
     "rows; high[0] set to 1 where a string held a byte >= 0x80 (for the UTF-8 check), else 0."},
    {"gather", gather, METH_VARARGS,
     "gather(payload, starts, ends, sep, prefix, suffix, fill) -> the spans joined by sep "
     "(fill for a span starting below 0)."},
    {"encode_spans", encode_spans, METH_VARARGS,
     "encode_spans(payload, starts, ends) -> (an int32 code per quoted span, the distinct "
     "texts' int32 offsets, their bytes): the texts without their quotes (\"\" for a start "
     "below 0) dictionary-encoded in order of first appearance."},
    {"compact", compact, METH_VARARGS,
     "compact(payload, starts, ends, fill) -> (the spans' texts back to back, each with the line "
     "breaks of Kineto's pretty printing removed as bytes.replace removes b'\\n      ', then "
     "b'\\n    ', then b'\\n'; their int64 lengths) (fill for a span starting below 0)."},
    {"join", join, METH_VARARGS,
     "join(data, offsets, codes) -> the texts offsets[c]:offsets[c + 1] of data for each code c "
     "of codes in order, those below 0 left out (int32 offsets and codes)."},
    {"copy_spans", copy_spans, METH_VARARGS,
     "copy_spans(sources, source, starts, lengths, out) -> bytes copied: span i of the buffer "
     "sources[source[i]] (int32 source, int64 starts and lengths) into the writable buffer out, "
     "back to back."},
    {"digits", digits, METH_VARARGS,
     "digits(values, prefix, suffix) -> (the int64 values in decimal, each between prefix and "
     "suffix, back to back; their int32 offsets)."},
    {"cut_ids", cut_ids, METH_VARARGS,
     "cut_ids(data, offsets) -> (the texts of the string table with the per-task ids of "
     "TASK_ID_KEYS cut from their front, back to back; their int32 offsets)."},
    {"named_keys", named_keys, METH_VARARGS,
     "named_keys(data, offsets, rows) -> one byte per row of rows (int64), 1 where the text "
     "of that row holds a quoted name of NAMED_KEYS or a quoted [a-z0-9_]+_ratio."},
    {"phase_codes", phase_codes, METH_VARARGS,
     "phase_codes(payload, spans, code_of_byte, out) -> None: for each event of spans (as scan "
     "wrote them) the code of its one-character phase (code_of_byte: 256 int64) into out "
     "(int64), -1 where its phase is absent or longer."},
    {"scatter", scatter, METH_VARARGS,
     "scatter(values, position, out) -> None: out[position[i]] = values[i] for each i (integers "
     "into integers as wide or wider, float64 into float64; int64 positions)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kscan",
                                    "Kineto event chunks scanned without Python objects.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kscan(void) {
    init_special();
    if (!init_keys(&FIELDS) || !init_keys(&ARGS) || N_ARGS > 31) {
        PyErr_SetString(PyExc_ImportError, "_kscan: a key table holds a key of 16 bytes or more, or too many keys");
        return NULL;
    }
    if (!scalar_slots_agree()) {
        PyErr_SetString(PyExc_ImportError, "_kscan: SCALAR_SLOT disagrees with SCALAR_FIELD");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* the args keys, in the order of the arg_* arrays' columns */
    PyObject *keys = PyTuple_New(N_ARGS);
    if (keys == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    for (int i = 0; i < N_ARGS; i++) {
        PyObject *key = PyUnicode_FromString(ARG_KEYS[i]);
        if (key == NULL) {
            Py_DECREF(keys);
            Py_DECREF(m);
            return NULL;
        }
        PyTuple_SET_ITEM(keys, i, key);
    }
    if (PyModule_AddObject(m, "ARG_KEYS", keys) < 0) {
        Py_DECREF(keys);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "FOUND_ESCAPED", (long)FOUND_ESCAPED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
