/* The K3 tensor roster (kimi-k3.md section 3): which tensors a text-only
 * engine needs for a given config, with their dtypes and shapes, and a check
 * of a checkpoint against it. Shared by `inspect`, the loader and the tools.
 *
 * Names: "language_model.model." + globals / "layers.{i}." + per-layer names,
 * and "language_model.lm_head.weight". Linear and norm weights end in
 * ".weight"; A_log, dt_bias and e_score_correction_bias are bare parameters.
 * Everything is BF16 except KDA {q,k,v}_conv1d.weight, A_log, dt_bias,
 * o_norm.weight and the router's e_score_correction_bias (F32), and the
 * routed experts' weight_packed / weight_scale (U8, MXFP4).
 * A_log is 1-D with at least num_heads entries (K3 stores 128 for 96 heads,
 * zero-padded); the canonical length is max(num_heads, head_dim). */
#ifndef DF_FORMAT_ROSTER_H
#define DF_FORMAT_ROSTER_H

#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "format/safetensors.h"

typedef enum df_tensor_class {
  DF_TC_SPINE,   /* language_model.* except routed experts */
  DF_TC_EXPERT,  /* language_model.model.layers.*.block_sparse_moe.experts.* */
  DF_TC_IGNORED, /* vision_tower.*, mm_projector.* (text-only engine) */
  DF_TC_OTHER    /* anything else: not part of a K3 checkpoint */
} df_tensor_class;

df_tensor_class df_roster_classify(const char *name);

/* Expert part index in record order: 0 w1 packed, 1 w1 scale, 2 w2 packed,
 * 3 w2 scale, 4 w3 packed, 5 w3 scale. */
extern const char *const df_expert_part_name[6]; /* "w1.weight_packed", ... */
/* Parses "language_model.model.layers.L.block_sparse_moe.experts.E.PART";
 * returns 0 and fills layer/expert/part, or -1 if the name is not that. */
int df_roster_parse_expert(const char *name, int *layer, int *expert, int *part);

typedef struct df_roster_item {
  char name[160];
  df_dtype dtype;
  int ndim;
  int64_t shape[DF_ST_MAX_DIMS];
  int min_len;  /* 1: a 1-D tensor may be longer than shape[0] (A_log padding) */
  int is_expert;
} df_roster_item;

/* Calls fn for every expected tensor in a fixed order: globals, then layer by
 * layer (spine tensors, then experts in id order, six parts each in record
 * order). Stops at the first non-zero return of fn and returns it. */
int df_roster_foreach(const df_config *c, int (*fn)(const df_roster_item *it, void *ctx),
                      void *ctx);
/* Expected dtype/shape of one tensor name: 1 and *out filled if the name is in
 * the roster for this config, 0 if not. */
int df_roster_expect(const df_config *c, const char *name, df_roster_item *out);
/* 1 if tensor t matches item it (dtype, and shape or min_len rule). */
int df_roster_matches(const df_roster_item *it, const df_tensor *t);

enum { DF_ROSTER_SCAN_SCALES = 1 }; /* flags: read every expert scale, reject E8M0 255 */
#define DF_ROSTER_MAX_LINES 200

typedef struct df_roster_report {
  long n_expected, n_found;
  long n_missing, n_bad_dtype, n_bad_shape, n_bad_layout, n_unexpected, n_bad_scales;
  long n_problems;
  char **lines; /* the first DF_ROSTER_MAX_LINES problems, one line each */
  int n_lines;
} df_roster_report;

/* Checks a checkpoint against the roster: missing, mistyped, misshaped and
 * unexpected tensors (vision_tower.* / mm_projector.* are ignored), and with
 * DF_ROSTER_SCAN_SCALES, E8M0 scale bytes of 255. Problems go to the report;
 * returns -1 only when the check itself could not run. */
int df_roster_check(const df_st_set *s, const df_config *c, int flags, df_roster_report *out,
                    df_err *e);
/* Like df_roster_check; with DF_ROSTER_SCAN_SCALES, progress (if not NULL) is
 * called after each scale tensor with the scale bytes read so far (a full K3
 * checkpoint has about 28 GB of them). */
typedef void (*df_roster_progress_fn)(uint64_t scanned_bytes, void *ctx);
int df_roster_check_progress(const df_st_set *s, const df_config *c, int flags,
                             df_roster_report *out, df_roster_progress_fn progress,
                             void *progress_ctx, df_err *e);
void df_roster_report_free(df_roster_report *r);

#endif
