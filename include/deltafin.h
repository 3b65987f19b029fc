/* deltafin's public C API: open a model, run sessions, generate tokens, read
 * the expert store's counters. A program needs only this header and the
 * library (libdfcore); every type is opaque or a plain options/result struct
 * the caller owns, so the engine's internals can change without breaking it.
 *
 * Errors: functions that can fail return 0 on success and -1 on failure, with
 * a one-line message (naming the file, field or option at fault) written to
 * err[0..errlen) when err is not NULL.
 *
 * Threads: one engine runs one forward pass at a time; use one session per
 * sequence and do not call into sessions of one engine concurrently.
 *
 * Determinism: greedy generation (temperature 0, the default) gives the same
 * ids as `deltafin run` for the same model, prompt ids and options, for any
 * thread count, cache size or memory limit. */
#ifndef DELTAFIN_H
#define DELTAFIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_api_engine df_api_engine;   /* a loaded model */
typedef struct df_api_session df_api_session; /* one sequence's state over an engine */

/* How to open an engine. Fill with df_api_opts_init, then set what you need. */
typedef struct df_api_opts {
  const char *model_dir; /* model folder (config.json, safetensors, tokenizer); required */
  int threads;           /* worker threads; 0 = all cores */
  long cache_mb;         /* expert RAM cache in MiB; -1 = the default (within the memory plan) */
  uint64_t mem_limit;    /* bytes to plan for; 0 = MemAvailable or the cgroup limit */
  int ctx;               /* context positions to admit; 0 = the memory plan's */
} df_api_opts;

void df_api_opts_init(df_api_opts *o);
int df_api_engine_open(df_api_engine **out, const df_api_opts *o, char *err, size_t errlen);
void df_api_engine_close(df_api_engine *en);

/* The model's vocabulary size and its end-of-sequence id. */
int df_api_vocab(const df_api_engine *en);
int df_api_eos_id(const df_api_engine *en);

/* Text to ids with the model's tokenizer (no BOS added, special-token
 * spellings are ordinary text): *ids is malloc'd (free with df_api_free). */
int df_api_tokenize(const df_api_engine *en, const char *text, int **ids, size_t *n, char *err,
                    size_t errlen);
/* Ids to text (UTF-8, NUL-terminated); NULL on an id outside the vocabulary.
 * Free with df_api_free. */
char *df_api_detokenize(const df_api_engine *en, const int *ids, size_t n);
void df_api_free(void *p);

/* Sessions: a new one is empty (position 0); reset empties it again. */
df_api_session *df_api_session_new(df_api_engine *en);
void df_api_session_free(df_api_session *s);
void df_api_session_reset(df_api_session *s);
int df_api_session_pos(const df_api_session *s); /* positions held */

/* Called with each new id as it is generated; return nonzero to stop (the
 * generation then ends with DF_API_FINISH_CANCEL). */
typedef int (*df_api_token_fn)(void *ud, int id);

typedef enum {
  DF_API_FINISH_STOP = 0,   /* a stop id was generated */
  DF_API_FINISH_LENGTH = 1, /* max_new ids generated */
  DF_API_FINISH_CANCEL = 2, /* on_token returned nonzero */
} df_api_finish;

/* How to generate. Fill with df_api_gen_opts_init (greedy, 256 ids, no stop
 * ids: as `deltafin run` continues a plain prompt), then set what you need. */
typedef struct df_api_gen_opts {
  int max_new;         /* new ids at most */
  float temperature;   /* 0 = greedy (exact); > 0 samples */
  float top_p;         /* nucleus sampling (with temperature > 0); 1 = off */
  uint64_t seed;       /* the sampler's seed */
  const int *stop_ids; /* generation stops after one of these (e.g. df_api_eos_id); NULL: none */
  int nstop;
  df_api_token_fn on_token; /* NULL: none */
  void *ud;
} df_api_gen_opts;

typedef struct df_api_gen_result {
  int n_prompt, n_gen;     /* prompt ids run, ids generated */
  df_api_finish finish;
  double prefill_s, decode_s;
} df_api_gen_result;

void df_api_gen_opts_init(df_api_gen_opts *o);
/* Runs prompt (continuing the session's state) and generates. The new ids go
 * to on_token as they come and, when ids is not NULL, to *ids (malloc'd, free
 * with df_api_free; *n their count). r may be NULL. After a cancel or an
 * error, reset the session before using it again. */
int df_api_generate(df_api_session *s, const int *prompt, int nprompt, const df_api_gen_opts *o,
                    int **ids, int *n, df_api_gen_result *r, char *err, size_t errlen);

/* The expert store's counters since the engine opened. */
typedef struct df_api_store_stats {
  uint64_t expert_bytes_read;  /* routed-expert bytes read from the drives */
  uint64_t expert_requests;    /* experts the forward passes asked for */
  uint64_t cache_hits;         /* of those, found in the RAM cache */
  uint64_t cache_resident_bytes;
  long cache_budget_mb;
  uint64_t spine_stream_bytes; /* dense weights streamed (0 when the spine is resident) */
  uint64_t read_errors, checksum_errors;
} df_api_store_stats;

int df_api_store_stats_get(df_api_engine *en, df_api_store_stats *st, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
