/* libFuzzer: the memory planner's two inputs from outside, sizes ("64G",
 * "1.5GiB") and arbitrary unit sizes / memory limits. A parsed size must be
 * what the text says within rounding; an accepted plan must fit its limit,
 * and a streamed unit must never be larger than what was left. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "synth/synth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NU 9

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char s[64];
  size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
  memcpy(s, data, n);
  s[n] = 0;
  uint64_t v;
  if (df_plan_parse_size(s, &v) == 0 && strtod(s, NULL) < 0) abort();

  static df_config cfg;
  static int have;
  if (!have) {
    df_synth_opts o = {.preset = "tiny", .seed = 1};
    df_err e;
    if (df_synth_config(&o, &cfg, &e)) abort();
    have = 1;
  }
  if (size < 8 * (NU + 1)) return 0;
  uint64_t ub[NU], ur[NU], M;
  for (int u = 0; u < NU; u++) {
    memcpy(&ub[u], data + 8 * u, 8);
    ub[u] &= (1ull << 40) - 1;
    ur[u] = (ub[u] + 4095) / 4096 * 4096 + 4096;
  }
  memcpy(&M, data + 8 * NU, 8);
  M &= (1ull << 42) - 1;
  df_plan_in in = {.cfg = &cfg, .nunits = NU, .unit_bytes = ub, .unit_read = ur,
                   .fixed_bytes = 1000, .embed_row_bytes = 128, .expert_record_bytes = 4096,
                   .mem_limit = M, .cache_req = -1, .cache_default = 1 << 20, .ctx_req = 0,
                   .max_rows = 1};
  df_plan p;
  df_err e;
  if (df_plan_make(&p, &in, &e) == 0) {
    uint64_t used = p.scratch_bytes + p.fixed_bytes + p.expert_min_bytes + p.state_bytes +
                    p.ring_bytes + p.resident_bytes + p.cache_bytes;
    if (used > M) abort();
    uint64_t left = M - (used - p.cache_bytes);
    for (int u = 0; u < NU; u++)
      if (!p.resident[u] && (ub[u] <= left || ur[u] > p.ring_slot_bytes)) abort();
  } else if (!strstr(e.msg, "at least")) {
    abort();
  }
  df_plan_free(&p);
  return 0;
}
