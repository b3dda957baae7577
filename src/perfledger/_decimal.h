/* Decimal text of an int64, shared by the compiled parts (sources/_kscan.c, and
   render/timeline/_records.c). */

#ifndef PERFLEDGER_DECIMAL_H
#define PERFLEDGER_DECIMAL_H

#include <stdint.h>

/* The decimal text of v at dst (at most 20 bytes with its sign); the byte after it. */
static inline char *put_decimal(char *dst, int64_t v) {
    char digits[20];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) *dst++ = '-';
    while (k > 0) *dst++ = digits[--k];
    return dst;
}

#endif
