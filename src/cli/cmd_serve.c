/* deltafin serve: the OpenAI-compatible HTTP server (src/serve). */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/opt_table.h"
#include "cli/engine_opts.h"
#include "engine/engine.h"
#include "serve/server.h"

void df_cmd_serve_help(void) {
  printf(
      "usage: deltafin serve --model DIR [options]\n"
      "\n"
      "Serves the model over an OpenAI-compatible HTTP API: GET /v1/models,\n"
      "POST /v1/chat/completions, POST /v1/completions (also without /v1), GET /health,\n"
      "POST /tokenize, POST /detokenize, POST /apply-template, GET /metrics (Prometheus\n"
      "text). One generation runs at a time, others wait in the queue; SIGINT/SIGTERM\n"
      "stop the server cleanly (a second one exits at once).\n"
      "\n"
      "Requests: OpenAI's fields, plus llama.cpp/Ollama's top_k, min_p and\n"
      "repeat_penalty; presence/frequency penalties, logit_bias, logprobs and\n"
      "top_logprobs, n > 1 (choices run one after another), tools and tool_choice\n"
      "(auto, none, required), response_format json_object / json_schema (constrained\n"
      "decoding; the reply is compact JSON in instruct mode). Every chat prompt is the\n"
      "release's apply_chat_template rendering, as `deltafin template` and `run --chat`\n"
      "give it (thinking effort max by default). reasoning_effort maps onto the\n"
      "release's efforts: minimal -> low, low, medium -> high (the release has no\n"
      "medium), high, xhigh and max -> max; none turns thinking off. A field that\n"
      "cannot be honoured gets 400 naming it.\n"
      "Special tokens: a /v1/completions prompt may spell them (<|open|>, ...), as a\n"
      "prompt the client rendered itself: they become the special ids, as in vLLM and\n"
      "`run --parse-special`. Chat message content never becomes special ids.\n"
      "\n"
      "server:\n"
      "  --host ADDR              address to listen on (default 127.0.0.1)\n"
      "  --port N                 TCP port (default 8000; 0 = any free port, logged)\n"
      "  --model-id ID            model id clients send (default: from the checkpoint)\n"
      "  --api-key KEY            require 'Authorization: Bearer KEY' (default: env\n"
      "                           DELTAFIN_API_KEY; none if unset)\n"
      "  --queue N                requests that may wait while one generates (default 4;\n"
      "                           0: 429 with Retry-After when busy)\n"
      "  --max-request-bytes N    larger request bodies get 413 (default 1048576)\n"
      "  --idle-timeout S         close connections silent for S seconds (default 60;\n"
      "                           0 = never); generating or queued requests are not idle\n"
      "  --reuse-mb N             conversation reuse: keep the state at the end of a prompt\n"
      "                           (up to N MiB, default 1024) and the state at the end of a\n"
      "                           reply; a prompt extending either prefills only its new\n"
      "                           part (usage.prompt_tokens_details.cached_tokens). 0 = off;\n"
      "                           the memory plan sets the kept states' memory aside\n"
      "  --request-timeout S      a request's headers and body must arrive within S seconds\n"
      "                           (default 30; 0 = no limit)\n"
      "  --max-tokens-default N   a request without max_tokens generates at most N tokens\n"
      "                           (default 0: chat until the context ends; /v1/completions\n"
      "                           16, OpenAI's default)\n"
      "  --max-client-connections N  connections one client address may hold (default 256;\n"
      "                           0 = no limit); over it the address's oldest idle\n"
      "                           connection is closed, or the new one answered 429\n"
      "  --max-connections N      open connections in all (default 1000); over it the\n"
      "                           oldest idle one is closed, or the new one answered 503\n"
      "  --trusted-proxy ADDR     a reverse proxy (IP address, repeatable): its requests are\n"
      "                           counted per X-Forwarded-For client (requests in progress,\n"
      "                           --max-client-connections) and logged with that address\n"
      "  --allow-host NAME        accept requests whose Host is NAME (repeatable; '*' = any).\n"
      "                           IP literals, localhost and --host are always accepted;\n"
      "                           other names are refused (403) against DNS rebinding\n"
      "  --cors ORIGIN            send CORS headers to this browser origin (repeatable;\n"
      "                           '*' = any; default: none)\n"
      "\n"
      "testing:\n"
      "  --debug-token-delay-ms N pause after every generated token\n"
      "  --debug-output-ids LIST  the output side sees these ids instead of the model's\n"
      "                           (tests of text, tool-call and stream plumbing)\n"
      "\n");
  df_cli_engine_help(stdout);
}

/* The server's plain values (cli/opt_table.h); the lists and the testing
 * aids below keep their own checks. */
#define SO(f) offsetof(df_serve_opts, f)
static const df_opt serve_rows[] = {
    {"--host", "ADDR", DF_OPT_STR, SO(host), 0, 0, 0, NULL, NULL},
    {"--port", "N", DF_OPT_INT, SO(port), 0, 65535, 0, NULL, NULL},
    {"--queue", "N", DF_OPT_INT, SO(queue), 0, 4096, 0, NULL, NULL},
    {"--idle-timeout", "S", DF_OPT_INT, SO(idle_timeout_s), 0, 86400, 0, NULL, NULL},
    {"--reuse-mb", "N", DF_OPT_LONG, SO(reuse_mb), 0, 1L << 30, 0, NULL, NULL},
    {"--request-timeout", "S", DF_OPT_INT, SO(request_timeout_s), 0, 86400, 0, NULL, NULL},
    {"--max-tokens-default", "N", DF_OPT_LONG, SO(max_tokens_default), 0, 1L << 30, 0, NULL,
     NULL},
    {"--max-client-connections", "N", DF_OPT_INT, SO(max_client_conns), 0, 1000, 0, NULL, NULL},
    {"--max-connections", "N", DF_OPT_INT, SO(max_conns), 1, 10000, 0, NULL, NULL},
};

int df_cmd_serve(int argc, char **argv) {
  if (df_cli_wants_help(argc, argv)) {
    df_cmd_serve_help();
    return 0;
  }
  df_engine_opts eo;
  df_engine_opts_default(&eo);
  df_serve_opts so;
  df_serve_opts_default(&so);
  so.api_key = getenv("DELTAFIN_API_KEY");
  if (so.api_key && !*so.api_key) so.api_key = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long x;
#define NEED_VAL() \
  do { \
    if (!v) return df_cli_fail("%s needs a value", a); \
    i++; \
  } while (0)
    int r = df_cli_engine_opt(&eo, "serve", argc, argv, &i);
    if (!r) r = df_opt_take(serve_rows, sizeof serve_rows / sizeof serve_rows[0], &so, "serve", argc,
                            argv, &i);
    if (r < 0) return 1;
    if (r > 0) continue;
    if (!strcmp(a, "--model-id")) {
      NEED_VAL();
      if (!*v) return df_cli_fail("--model-id must not be empty");
      so.model_id = v;
    } else if (!strcmp(a, "--api-key")) {
      NEED_VAL();
      if (!*v) return df_cli_fail("--api-key must not be empty");
      so.api_key = v;
    } else if (!strcmp(a, "--max-request-bytes")) {
      NEED_VAL();
      if (df_cli_int(a, v, 64, 1L << 30, &x)) return 1;
      so.max_request_bytes = (size_t)x;
    } else if (!strcmp(a, "--trusted-proxy")) {
      NEED_VAL();
      if (!*v) return df_cli_fail("--trusted-proxy must not be empty");
      if (so.ntrusted == 16) return df_cli_fail("--trusted-proxy: at most 16");
      so.trusted_proxies[so.ntrusted++] = v;
    } else if (!strcmp(a, "--allow-host")) {
      NEED_VAL();
      if (!*v) return df_cli_fail("--allow-host must not be empty");
      if (so.nallow_hosts == 16) return df_cli_fail("--allow-host: at most 16");
      so.allow_hosts[so.nallow_hosts++] = v;
    } else if (!strcmp(a, "--cors")) {
      NEED_VAL();
      if (!*v) return df_cli_fail("--cors must not be empty");
      if (so.ncors == 16) return df_cli_fail("--cors: at most 16");
      so.cors[so.ncors++] = v;
    } else if (!strcmp(a, "--debug-output-ids")) {
      NEED_VAL();
      /* testing aid: the output side (text, tool calls) sees these ids */
      static int forced[4096];
      int n = 0;
      for (const char *p = v; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || id < 0 || n == 4096)
          return df_cli_fail("--debug-output-ids: '%s' is not a list of token ids", v);
        forced[n++] = (int)id;
        if (*end && *end != ',') return df_cli_fail("--debug-output-ids: bad list '%s'", v);
        p = *end == ',' ? end + 1 : end;
      }
      so.forced_ids = forced;
      so.nforced = n;
    } else if (!strcmp(a, "--debug-token-delay-ms")) {
      NEED_VAL();
      if (df_cli_int(a, v, 0, 60000, &x)) return 1;
      so.token_delay_ms = (int)x;
    } else {
      return df_cli_fail("serve: unknown option '%s' (see deltafin serve --help)", a);
    }
#undef NEED_VAL
  }
  if (!eo.model_dir) return df_cli_fail("serve: --model DIR is required");

  /* SIGINT/SIGTERM are taken by the server with sigwait: block them before
   * any thread (the engine's pool included) exists, so none of them dies of it. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);

  /* the kept prompt states are memory the plan must leave room for */
  eo.reuse_bytes = so.reuse_mb > 0 ? (uint64_t)so.reuse_mb << 20 : 0;
  eo.reuse_states = DF_SERVE_MAX_KEPT;

  df_err e;
  df_engine *en = NULL;
  if (df_engine_open(&en, &eo, &e)) return df_cli_fail("%s", e.msg);
  int rc = df_serve_run(en, &so, &e);
  df_engine_close(en);
  if (rc) return df_cli_fail("%s", e.msg);
  return 0;
}
