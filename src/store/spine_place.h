/* Where the spine section of a pack puts each unit's bytes (a pure
 * function, unit-tested).
 *
 * Every spine byte is read every token, so a drive's spine load is its
 * share of the spine's bytes: each unit's buffer image is cut into aligned
 * chunks of min(chunk_max, its bytes / ndrives rounded down to the
 * alignment, at least one page), and each chunk goes to the drive whose
 * spine bytes per unit of bandwidth would be lowest with it (ties to the
 * lower index), a unit's first ndrives chunks to distinct drives. A unit of
 * at least ndrives pages therefore spreads over every drive (its read uses
 * them all), and the drives' totals stay within one chunk of each other
 * when their bandwidths are equal. The experts are balanced separately by their
 * own expected load (pack.h), so the per-token load of a drive, spine plus
 * experts, is balanced when both are. Offsets on a drive follow placement
 * order, from that drive's base (the end of its expert records). */
#ifndef DF_STORE_SPINE_PLACE_H
#define DF_STORE_SPINE_PLACE_H

#include <stdint.h>

#include "store/manifest.h"

/* Fills sp's units (unit ids from unit_ids, bytes from unit_bytes, each a
 * multiple of align and > 0) and chunks (drive, offset, len; xxh3 0).
 * bw: per drive, NULL or any <= 0 = all equal. base[d]: first free aligned
 * offset of drive d; end[d] gets its first offset past the spine. sp's kind
 * and layout are left to the caller. */
void df_spine_place(df_mf_spine *sp, const int *unit_ids, const uint64_t *unit_bytes, int nunits,
                    int ndrives, const double *bw, uint64_t chunk_max, uint32_t align,
                    const uint64_t *base, uint64_t *end);

#endif
