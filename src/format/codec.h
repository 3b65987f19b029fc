/* Number formats: bf16/f16 <-> f32, MXFP4 (OCP MX v1.0: E2M1 elements,
 * E8M0 scales, 32-element groups), row-int8 (per-row absmax/127 scale). */
#ifndef DF_FORMAT_CODEC_H
#define DF_FORMAT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

float df_bf16_to_f32(uint16_t h);
uint16_t df_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float df_f16_to_f32(uint16_t h);
uint16_t df_f32_to_f16(float f); /* round to nearest even */

/* E2M1 code (0..15) -> value. */
extern const float df_e2m1_table[16];
/* E8M0 scale byte -> 2^(s-127); s = 255 is NaN and must be rejected before use. */
float df_e8m0_to_f32(uint8_t s);

#define DF_MXFP4_GROUP 32
/* Validates the scales of an MXFP4 matrix (no 255). label names the tensor. */
int df_mxfp4_check_scales(const uint8_t *scales, size_t n, const char *label, df_err *e);
/* Dequantises one row of `cols` values (cols % 32 == 0): packed has cols/2
 * bytes (low nibble = even column), scales has cols/32 bytes. */
void df_mxfp4_dequant_row(const uint8_t *packed, const uint8_t *scales, int cols, float *out);
/* Quantises a row to MXFP4 (used by the checkpoint generator): per group the
 * scale is the smallest power of two with max|x|/scale <= 6, codes round to
 * the nearest E2M1 value (ties to the even code). */
void df_mxfp4_quant_row(const float *x, int cols, uint8_t *packed, uint8_t *scales);

/* Row-int8: scale = absmax/127 (an all-zero row gets scale 0 and all-zero
 * codes), q = round-half-even(x/scale) clamped to [-127,127]. */
void df_int8_quant_row(const float *x, int cols, int8_t *q, float *scale);
void df_int8_dequant_row(const int8_t *q, float scale, int cols, float *out);

#endif
