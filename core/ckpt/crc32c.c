/* CRC-32C: SSE4.2's crc32 instruction when the CPU has it (chosen once),
 * else a slicing-by-8 table.  Both give the same value (tests/ckpt checks
 * the standard check value "123456789" -> 0xe3069283). */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t table[8][256];
static int table_ready;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    table_ready = 1;
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
    if (!table_ready) make_table(); /* idempotent: racing threads write the same values */
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
static int have_hw(void) {
    static int v = -1;
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return v;
}
#endif

uint32_t zero__crc32c(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (have_hw()) return ~crc_hw(crc, p, n);
#endif
    return ~crc_sw(crc, p, n);
}

uint32_t zero__crc32c_portable(uint32_t crc, const void *data, size_t n) {
    return ~crc_sw(~crc, data, n);
}
