#include "serve/gentext.h"

#include <stdlib.h>
#include <string.h>

#define TEXT_BUF 4096

void df_gentext_init(df_gentext *g, df_serve_kind kind, const df_tok *tok, int eot_id,
                     char *const *stops, const size_t *stop_lens, int nstop, df_gentext_sink sink,
                     void *ud) {
  memset(g, 0, sizeof *g);
  g->kind = kind;
  g->tok = tok;
  g->eot_id = eot_id;
  g->sink = sink;
  g->ud = ud;
  df_chat_split_init(&g->split, tok);
  df_tok_stream_init(&g->ts, tok);
  df_stop_init(&g->stop_r, stops, stop_lens, nstop);
  df_stop_init(&g->stop_c, stops, stop_lens, nstop);
}

void df_gentext_open_response(df_gentext *g) {
  int open = df_tok_special_id(g->tok, "<|open|>"), sep = df_tok_special_id(g->tok, "<|sep|>");
  int *ids = NULL;
  size_t n = 0, cap = 0;
  df_err e;
  if (open < 0 || sep < 0 || df_tok_encode(g->tok, "response", 8, &ids, &n, &cap, &e)) {
    free(ids);
    return; /* a tokenizer without the K3 markup: there is no think channel to leave */
  }
  char buf[64];
  df_channel ch;
  df_chat_split_push(&g->split, open, buf, sizeof buf, &ch);
  for (size_t i = 0; i < n; i++) df_chat_split_push(&g->split, ids[i], buf, sizeof buf, &ch);
  df_chat_split_push(&g->split, sep, buf, sizeof buf, &ch);
  free(ids);
}

void df_gentext_free(df_gentext *g) {
  df_stop_free(&g->stop_r);
  df_stop_free(&g->stop_c);
}

static void release(df_gentext *g, df_channel ch, df_sbuf *b) {
  if (b->n) g->sink(g->ud, ch, b->p, b->n);
  b->n = 0;
}

/* Text of one channel through that channel's stop matcher. */
static void text_in(df_gentext *g, df_channel ch, const char *text, size_t n) {
  if (g->stopped || (ch != DF_CH_REASONING && ch != DF_CH_RESPONSE)) return;
  df_sbuf rel = {0};
  if (ch == DF_CH_RESPONSE && !g->resp_started) {
    /* the think part is over: what its matcher held back is released first */
    g->resp_started = 1;
    df_stop_flush(&g->stop_r, &rel);
    release(g, DF_CH_REASONING, &rel);
  }
  if (df_stop_push(ch == DF_CH_REASONING ? &g->stop_r : &g->stop_c, text, n, &rel)) g->stopped = 1;
  release(g, ch, &rel);
  df_sbuf_free(&rel);
}

int df_gentext_push(df_gentext *g, int id) {
  if (g->stopped) return 1;
  char buf[TEXT_BUF];
  df_channel ch = DF_CH_RESPONSE;
  int n = 0;
  if (g->kind == DF_SERVE_CHAT) {
    n = df_chat_split_push(&g->split, id, buf, sizeof buf, &ch);
    if (ch == DF_CH_REASONING) g->n_reasoning++;
  } else if (id != g->eot_id) {
    n = df_tok_stream_push(&g->ts, id, buf, sizeof buf);
  }
  g->last_ch = ch;
  if (n > 0) text_in(g, ch, buf, (size_t)n);
  return g->stopped;
}

void df_gentext_finish(df_gentext *g) {
  if (g->stopped) return;
  char buf[TEXT_BUF];
  int chat = g->kind == DF_SERVE_CHAT;
  df_channel ch = chat ? g->split.ch : DF_CH_RESPONSE;
  int n = df_tok_stream_flush(chat ? &g->split.stream : &g->ts, buf, sizeof buf);
  if (n > 0) text_in(g, ch, buf, (size_t)n);
  if (g->stopped) return;
  df_sbuf rel = {0};
  df_stop_flush(&g->stop_r, &rel);
  release(g, DF_CH_REASONING, &rel);
  df_stop_flush(&g->stop_c, &rel);
  release(g, DF_CH_RESPONSE, &rel);
  df_sbuf_free(&rel);
}
