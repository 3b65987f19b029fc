/* Private to src/synth/: the tensor plan (synth.c) and the parallel writer
 * that fills it (synth_gen.c). */
#ifndef DF_SYNTH_SYNTH_INT_H
#define DF_SYNTH_SYNTH_INT_H

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"

typedef enum gen_kind {
  G_UNIFORM,   /* off + U(-a, a) */
  G_ALOG,      /* first `used` entries off + U(-a, a), the rest zero */
  G_MX_PACKED, /* a [rows, cols] matrix U(-a, a) quantised to MXFP4: the packed codes */
  G_MX_SCALE,  /* ... and its scales (produced with the packed tensor just before) */
  G_CODES,     /* random E2M1 code bytes */
  G_SCALES,    /* random E8M0 scales in [118, 121] */
} gen_kind;

typedef struct tspec {
  char name[160];
  df_dtype dt;
  int ndim;
  int64_t shape[3];
  gen_kind kind;
  double a, off;
  int used;
  int group; /* tensors of one group stay in one shard, consecutively */
  int shard;
  int hole;  /* --spine int8: no bf16 data (a hole); its values go to the int8 copy */
  uint64_t nelem, nbytes;
} tspec;

typedef struct plan {
  tspec *t;
  int n, cap;
  int ngroups;
  int nshards;
  uint64_t total;
} plan;

/* How the weights are written (synth_gen.c). */
typedef struct synth_out {
  const char *out_dir;
  const char *spine_dir; /* --spine int8: where the row-int8 copy goes; NULL = none */
  uint64_t seed;
  int threads;  /* 0 = every online CPU */
  int progress; /* a bar (or periodic lines) on stderr */
} synth_out;

void synth_shard_name(char *buf, size_t cap, int i, int n);

/* Writes every shard of p (holes for tensors marked hole) and, with a spine
 * dir, the row-int8 copy of the hole tensors with its index, on o->threads
 * threads; fills wmap (tensor -> shard file) for the model's index. Each
 * file is written under a temporary name and renamed once all its bytes
 * are in. */
int synth_write_weights(const synth_out *o, const plan *p, json_t *wmap, df_err *e);

#endif
