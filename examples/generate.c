/* A short program using only deltafin's public header: opens a model,
 * tokenizes a prompt, generates a few ids greedily with a token callback that
 * streams them, then prints the ids, the text and the expert store's counters.
 *
 * usage: generate MODEL_DIR PROMPT [N]
 * stdout: "ids: a,b,c" (the generated ids, as `deltafin run --json` reports
 * them in output_ids), "text: ..." and "store: ..." lines. */
#include <stdio.h>
#include <stdlib.h>

#include "deltafin.h"

typedef struct streamed {
  int n;
} streamed;

/* Called with every id as it is generated; returning nonzero would stop. */
static int on_token(void *ud, int id) {
  streamed *s = ud;
  fprintf(stderr, "%s%d", s->n++ ? "," : "token ids as they come: ", id);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL_DIR PROMPT [N]\n", argv[0]);
    return 2;
  }
  int max_new = argc > 3 ? atoi(argv[3]) : 8;
  char err[1024];
  df_api_opts o;
  df_api_opts_init(&o);
  o.model_dir = argv[1];
  df_api_engine *en;
  if (df_api_engine_open(&en, &o, err, sizeof err)) {
    fprintf(stderr, "generate: %s\n", err);
    return 1;
  }
  int rc = 1;
  int *prompt = NULL, *ids = NULL, n = 0;
  size_t np = 0;
  df_api_session *s = df_api_session_new(en);
  if (!s) {
    fprintf(stderr, "generate: no memory for a session\n");
    goto out;
  }
  if (df_api_tokenize(en, argv[2], &prompt, &np, err, sizeof err)) {
    fprintf(stderr, "generate: %s\n", err);
    goto out;
  }
  df_api_gen_opts g;
  df_api_gen_opts_init(&g);
  g.max_new = max_new;
  streamed st = {0};
  g.on_token = on_token;
  g.ud = &st;
  df_api_gen_result r;
  if (df_api_generate(s, prompt, (int)np, &g, &ids, &n, &r, err, sizeof err)) {
    fprintf(stderr, "\ngenerate: %s\n", err);
    goto out;
  }
  fprintf(stderr, "\n");
  printf("ids: ");
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
  char *text = df_api_detokenize(en, ids, (size_t)n);
  printf("\ntext: %s\n", text ? text : "");
  df_api_free(text);
  df_api_store_stats ss;
  if (df_api_store_stats_get(en, &ss, err, sizeof err)) {
    fprintf(stderr, "generate: %s\n", err);
    goto out;
  }
  printf("store: %llu expert bytes read, %llu of %llu expert requests from the cache\n",
         (unsigned long long)ss.expert_bytes_read, (unsigned long long)ss.cache_hits,
         (unsigned long long)ss.expert_requests);
  printf("finish: %s after %d prompt ids and %d new ids\n",
         r.finish == DF_API_FINISH_STOP ? "stop" : r.finish == DF_API_FINISH_CANCEL ? "cancel"
                                                                                   : "length",
         r.n_prompt, r.n_gen);
  rc = 0;
out:
  df_api_free(prompt);
  df_api_free(ids);
  df_api_session_free(s);
  df_api_engine_close(en);
  return rc;
}
