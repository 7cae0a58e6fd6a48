/* CRC-32C (Castagnoli), the checksum of checkpoint chunks.
 *
 * Why CRC-32C: it catches every burst of up to 32 flipped bits and any odd
 * number of flipped bits in a chunk (a flipped exponent bit is the failure
 * the manifest must catch), and x86's SSE4.2 computes it at several GB/s,
 * so checking a checkpoint costs little next to reading it.  Not a defence
 * against deliberate tampering.  Pure, reentrant, any thread. */
#ifndef ZERO_CKPT_CRC32C_H
#define ZERO_CKPT_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: crc32c(crc32c(0, a), b) == crc32c(0, a ++ b). */
uint32_t zero__crc32c(uint32_t crc, const void *data, size_t n);
/* The table version alone (tests compare it with the dispatched one). */
uint32_t zero__crc32c_portable(uint32_t crc, const void *data, size_t n);
#endif
