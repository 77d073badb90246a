/* core/record/_crc32.c: zlib's CRC-32 for core.record._accel. */
#ifndef MQSTORE_CRC32_H
#define MQSTORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

extern int crc32_clmul;            /* 1 once crc32_init found carry-less multiply */

void crc32_init(void);             /* the tables and the CPU check; once, before crc32_of */
uint32_t crc32_of(uint32_t crc, const uint8_t *p, size_t n);     /* zlib.crc32(p[:n], crc) */

#endif
