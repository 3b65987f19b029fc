/* The generation thread: runs queued jobs on the session and turns tokens
 * into text, logprobs, tool calls and SSE frames. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/log.h"
#include "base/rng.h"
#include "base/util.h"
#include "serve/server_int.h"

/* ------------------------------------------------------ generation side */

/* The gentext sink: text a client may see now. Streams collect a token's
 * text and turn it into frames after the token (emit), so that a content
 * frame carries the log-probabilities of the tokens it covers. */
void df_srv_deliver(void *ud, df_channel ch, const char *text, size_t n) {
  job *j = ud;
  choice *c = &j->ch[j->cur];
  if (j->req.stream)
    df_sbuf_add(ch == DF_CH_REASONING ? &j->tok_r : &j->tok_c, text, n);
  else
    df_sbuf_add(ch == DF_CH_REASONING ? &c->reasoning : &c->content, text, n);
}

/* Streams: the frames for the text released since the last call. at_end
 * also sends log-probabilities still waiting for text (held back by a stop
 * matcher or a partial character). */
static void emit(job *j, int at_end) {
  choice *c = &j->ch[j->cur];
  int chat = j->req.kind == DF_SERVE_CHAT;
  if (j->tok_r.n) {
    df_serve_sse_delta_lp(&j->frames, &j->meta, j->cur, NULL, "reasoning_content", j->tok_r.p,
                          j->tok_r.n, NULL, NULL, 0, 0, 0);
    j->tok_r.n = 0;
  }
  size_t pend = c->nlp - c->lp_sent;
  if (j->tok_c.n || (at_end && pend && j->req.logprobs)) {
    df_serve_sse_delta_lp(&j->frames, &j->meta, j->cur, NULL, chat ? "content" : NULL,
                          j->tok_c.p ? j->tok_c.p : "", j->tok_c.n, NULL,
                          /* no logprobs asked: lp is NULL, and NULL + 0 is undefined */
                          c->lp ? c->lp + c->lp_sent : NULL, pend, j->req.logprobs,
                          c->text_sent);
    c->lp_sent = c->nlp;
    c->text_sent += j->tok_c.n;
    j->tok_c.n = 0;
  }
}

/* Under S->mu: the frames built so far go out to the connection; for
 * /v1/responses as Responses events. */
static void frames_out_locked(job *j) {
  if (!j->frames.n) return;
  if (j->rs) df_resp_stream_feed(j->rs, j->frames.p, j->frames.n, &j->out);
  else df_sbuf_add(&j->out, j->frames.p, j->frames.n);
  pthread_cond_broadcast(&j->cv);
}

/* Hands the frames built so far to the connection. */
static void publish(job *j) {
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  frames_out_locked(j);
  pthread_mutex_unlock(&S->mu);
  j->frames.n = 0;
}

/* The chosen token's log-probability and the alternatives, from the logits
 * it was drawn from (the model's distribution, before penalties and
 * temperature). Only tokens of the visible text count: chat's response
 * channel (not its reasoning, no special tokens); a completion's every token
 * but the end of text. */
static void record_logprob(job *j, int id) {
  srv *S = j->S;
  if (j->req.kind == DF_SERVE_CHAT) {
    if (df_tok_is_special(S->tok, id) || j->gt.last_ch != DF_CH_RESPONSE) return;
  } else if (id == j->gt.eot_id) {
    return; /* ends the text, adds none (a completion shows other specials by name) */
  }
  choice *c = &j->ch[j->cur];
  if (c->nlp == c->caplp) {
    c->caplp = c->caplp ? c->caplp * 2 : 64;
    c->lp = df_xrealloc(c->lp, c->caplp * sizeof *c->lp);
  }
  df_serve_lp *e = &c->lp[c->nlp++];
  int top[DF_SERVE_MAX_TOP_LOGPROBS];
  double tlp[DF_SERVE_MAX_TOP_LOGPROBS];
  int ntop = j->req.top_logprobs;
  e->lp = df_sample_logprobs(df_session_logits(S->sess), S->limits.vocab, id, ntop, top, tlp);
  e->p = df_tok_piece(S->tok, id, &e->n);
  e->ntop = ntop;
  for (int k = 0; k < ntop; k++) {
    e->top[k].p = df_tok_piece(S->tok, top[k], &e->top[k].n);
    e->top[k].lp = tlp[k];
  }
}

/* Tool-using requests: the release's output parser's events. */
static void on_chat_event(const df_chat_event *ev, void *ctx) {
  job *j = ctx;
  choice *c = &j->ch[j->cur];
  switch (ev->kind) {
    case DF_CHAT_EV_REASONING:
      j->tok_reasoning = 1;
      df_srv_deliver(j, DF_CH_REASONING, ev->text, ev->len);
      break;
    case DF_CHAT_EV_CONTENT:
      df_srv_deliver(j, DF_CH_RESPONSE, ev->text, ev->len);
      break;
    case DF_CHAT_EV_CALL_BEGIN: {
      if (c->ncb == c->capcb) {
        c->capcb = c->capcb ? 2 * c->capcb : 4;
        c->cb = df_xrealloc(c->cb, c->capcb * sizeof *c->cb);
      }
      struct callbuf *b = &c->cb[c->ncb++];
      memset(b, 0, sizeof *b);
      df_sbuf_add(&b->name, ev->text, ev->len);
      df_sbuf_add(&b->args, "", 0);
      df_serve_meta tmp;
      df_serve_meta_init(&tmp, DF_SERVE_CHAT, "", 0); /* a fresh random suffix */
      snprintf(b->c.id, sizeof b->c.id, "call_%.24s", tmp.id + strlen("chatcmpl-"));
      if (j->req.stream) {
        emit(j, 0); /* text before the call goes first */
        b->c.name = b->name.p;
        b->c.nname = b->name.n;
        df_serve_sse_tool_delta(&j->frames, &j->meta, j->cur, (int)c->ncb - 1, &b->c, "", 0);
      }
      break;
    }
    case DF_CHAT_EV_CALL_ARGS:
      if (ev->call >= 0 && (size_t)ev->call < c->ncb) {
        df_sbuf_add(&c->cb[ev->call].args, ev->text, ev->len);
        if (j->req.stream)
          df_serve_sse_tool_delta(&j->frames, &j->meta, j->cur, ev->call, NULL, ev->text, ev->len);
      }
      break;
    default:
      break;
  }
}

static df_tg_sym tool_sym(const srv *S, int id) {
  if (id == S->sp_open) return DF_TG_OPEN;
  if (id == S->sp_close) return DF_TG_CLOSE;
  if (id == S->sp_sep) return DF_TG_SEP;
  if (id == S->chat_stop[0]) return DF_TG_EOM;
  return DF_TG_OTHER;
}

static int on_token(void *ud, int id) {
  job *j = ud;
  srv *S = j->S;
  if (S->o.token_delay_ms > 0) usleep((useconds_t)S->o.token_delay_ms * 1000u);
  int forced_end = 0;
  if (S->o.nforced) {
    id = S->o.forced_ids[j->forced_k < S->o.nforced ? j->forced_k : S->o.nforced - 1];
    forced_end = ++j->forced_k >= S->o.nforced;
  }
  if (j->req.toolgram) {
    if (df_tok_is_special(S->tok, id)) {
      df_tm_feed_sym(&j->tm, tool_sym(S, id));
    } else {
      size_t pn;
      const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
      df_tm_feed_bytes(&j->tm, pp, pn);
    }
  }
  if (j->req.grammar && !df_tok_is_special(S->tok, id)) {
    size_t pn;
    const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
    df_jm_feed(&j->jm, pp, pn);
  }
  if (j->cp) {
    j->tok_reasoning = 0;
    df_chat_parser_push(j->cp, id, on_chat_event, j);
    if (j->tok_reasoning) j->n_reasoning_tok++;
  }
  int was_stopped = j->gt.stopped;
  /* tools: the message ends at <|end_of_msg|> as the parser sees it */
  int stopped = j->cp ? df_chat_parser_ended(j->cp) : df_gentext_push(&j->gt, id);
  if (j->cp && stopped) j->gt.stopped = 1; /* the message is complete: finish "stop" */
  if (j->req.logprobs && !was_stopped && !j->cp) record_logprob(j, id);
  if (j->req.stream) emit(j, 0);
  pthread_mutex_lock(&S->mu);
  j->n_gen++;
  if (!j->first_seen) {
    j->first_seen = 1;
    df_serve_hist_add(&S->m_ttft, df_now() - j->t0);
  }
  frames_out_locked(j);
  /* a slow reader holds the generation back instead of growing the buffer */
  while (j->out.n - j->out_off > STREAM_HIGH_WATER && !df_srv_peer_gone_locked(j) && !j->shutdown)
    df_srv_timed_wait(&j->cv, &S->mu, WAIT_SLICE_MS);
  int cancel = df_srv_peer_gone_locked(j) || j->shutdown;
  pthread_mutex_unlock(&S->mu);
  j->frames.n = 0;
  return cancel || stopped || forced_end;
}

/* Structured output: every token whose bytes would leave the reply no longer
 * a prefix of an accepted document is masked; specials are masked but for
 * the end of the message once the document is complete (and then only it). */
static void grammar_mask(void *ud, float *lg) {
  job *j = ud;
  srv *S = j->S;
  int V = S->limits.vocab;
  for (int id = 0; id < V; id++) {
    if (df_tok_is_special(S->tok, id)) {
      if (!(j->jm.done && id == S->chat_stop[0])) lg[id] = -INFINITY;
      continue;
    }
    size_t pn;
    const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
    if (j->jm.done || !pn || !df_jm_accepts(&j->jm, pp, pn)) lg[id] = -INFINITY;
  }
}

/* Tool choice: every token the tool-call matcher refuses is masked (a
 * forced call, no call for "none", one call for parallel_tool_calls false). */
static void tool_mask(void *ud, float *lg) {
  job *j = ud;
  srv *S = j->S;
  int V = S->limits.vocab;
  for (int id = 0; id < V; id++) {
    if (lg[id] == -INFINITY) continue;
    int ok;
    if (df_tok_is_special(S->tok, id)) {
      ok = df_tm_accepts_sym(&j->tm, tool_sym(S, id));
    } else {
      size_t pn;
      const uint8_t *pp = df_tok_piece(S->tok, id, &pn);
      ok = df_tm_accepts_bytes(&j->tm, pp, pn);
    }
    if (!ok) lg[id] = -INFINITY;
  }
}

/* df_generate's cancel poll: runs after every layer, so a long prefill stops
 * within a layer of the hang-up or the shutdown. */
static int gen_cancelled(void *ud) {
  job *j = ud;
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  int cancel = df_srv_peer_gone_locked(j) || j->shutdown;
  pthread_mutex_unlock(&S->mu);
  return cancel;
}

static void on_prefill(void *ud, int done) {
  job *j = ud;
  srv *S = j->S;
  pthread_mutex_lock(&S->mu);
  j->prefilled = j->start + done;
  pthread_mutex_unlock(&S->mu);
  if (j->want_snap && j->start + done == (int)j->nprompt) df_srv_keep_prompt_state(S, j);
}

/* The engine's counters are the generation thread's to read: it copies them
 * out after each job for /metrics. */
static void publish_stats(srv *S) {
  char *sj = df_engine_stats_json(S->en);
  size_t kb = df_srv_kept_bytes(S);
  pthread_mutex_lock(&S->mu);
  free(S->stats_json);
  S->stats_json = sj;
  S->m_kept_bytes = kb;
  S->m_kept_states = S->nsnaps;
  pthread_mutex_unlock(&S->mu);
}

/* Runs the job's choices one after another (n > 1 is sequential: one
 * session). Choice i > 0 draws with a seed derived from the request's. */
static void run_job(srv *S, job *j) {
  df_gen_opts go;
  df_gen_opts_default(&go);
  go.max_new = (int)df_serve_max_new(&j->req, (long)j->nprompt, S->max_pos, S->o.max_tokens_default);
  if (j->req.kind == DF_SERVE_CHAT) {
    go.stop_ids = S->chat_stop;
    go.nstop = S->nchat_stop;
  } else {
    go.stop_ids = S->text_stop;
    go.nstop = S->ntext_stop;
  }
  df_sample_opts so;
  df_sample_opts_default(&so);
  so.temperature = (float)j->req.temperature;
  so.top_p = (float)j->req.top_p;
  so.top_k = j->req.top_k;
  so.min_p = (float)j->req.min_p;
  so.repeat_penalty = (float)j->req.repeat_penalty;
  so.presence_penalty = (float)j->req.presence_penalty;
  so.frequency_penalty = (float)j->req.frequency_penalty;
  so.bias = j->req.bias;
  so.nbias = j->req.nbias;
  go.temperature = so.temperature;
  go.top_p = so.top_p;
  go.sampling = &so;
  uint64_t seed = j->req.seed;
  if (!j->req.has_seed && getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
    seed = (uint64_t)time(NULL);
  go.on_token = on_token;
  if (j->req.grammar) go.mask = grammar_mask;
  else if (j->req.toolgram) go.mask = tool_mask;
  go.cancel = gen_cancelled;
  go.on_prefill = on_prefill;
  go.ud = j;
  j->nch = j->req.n > 0 ? j->req.n : 1;
  j->ch = df_xcalloc((size_t)j->nch, sizeof *j->ch);

  df_gen_stats st;
  memset(&st, 0, sizeof st);
  df_err e;
  int rc = 0, gone = 0, shutdown = 0, stopped = 0;
  long total_gen = 0, total_reasoning = 0, total_drafted = 0, total_accepted = 0;
  for (int ci = 0; ci < j->nch; ci++) {
    j->cur = ci;
    choice *c = &j->ch[ci];
    go.seed = seed;
    if (ci > 0) {
      uint64_t x = seed + (uint64_t)ci;
      go.seed = df_splitmix64(&x);
    }
    df_gentext_init(&j->gt, j->req.kind, S->tok, S->ntext_stop ? S->text_stop[0] : -1,
                    j->req.stop, j->req.stop_len, j->req.nstop, df_srv_deliver, j);
    if (j->req.kind == DF_SERVE_CHAT && !j->req.thinking) df_gentext_open_response(&j->gt);
    j->forced_k = 0;
    if (j->req.grammar) df_jm_init(&j->jm, j->req.grammar);
    if (j->req.toolgram) df_tm_init(&j->tm, j->req.toolgram);
    if (j->req.tools_json || j->req.grammar) {
      j->cp = df_chat_parser_new(S->tok, j->req.grammar || !j->req.thinking ? 0 : 1);
      j->n_reasoning_tok = 0;
    }
    if (j->req.stream && j->req.kind == DF_SERVE_CHAT) {
      df_serve_sse_delta_lp(&j->frames, &j->meta, ci, "assistant", "content", "", 0, NULL, NULL,
                            0, 0, 0);
      publish(j);
    }
    j->start = df_srv_reuse_start(S, j);
    if (ci == 0) j->cached = j->start;
    j->want_snap = S->reuse_max_bytes && j->start < (int)j->nprompt;
    S->live_ok = 0; /* until this generation ends cleanly */
    int *ids = NULL, nids = 0;
    memset(&st, 0, sizeof st);
    go.history = j->prompt; /* the reused prefix: the repeat penalty sees it */
    go.nhistory = j->start;
    rc = df_generate(S->sess, j->prompt + j->start, (int)j->nprompt - j->start, &go, &ids, &nids,
                     &st, &e);
    if (!rc && st.finish != DF_FINISH_CANCEL && S->reuse_max_bytes) {
      /* the live state covers the prompt and every new id but the last
       * (which was drawn, not run) */
      int nl = (int)j->nprompt + (nids > 0 ? nids - 1 : 0);
      S->live_ids = df_xrealloc(S->live_ids, sizeof(int) * (size_t)(nl ? nl : 1));
      memcpy(S->live_ids, j->prompt, sizeof(int) * j->nprompt);
      if (nids > 1) memcpy(S->live_ids + j->nprompt, ids, sizeof(int) * (size_t)(nids - 1));
      S->nlive = nl;
      S->live_ok = 1;
    }
    free(ids);
    pthread_mutex_lock(&S->mu);
    S->m_prefill_s += st.prefill_s;
    S->m_decode_s += st.decode_s;
    if (st.n_gen > 0 && st.decode_s > 0) S->m_tps = st.n_gen / st.decode_s;
    pthread_mutex_unlock(&S->mu);

    pthread_mutex_lock(&S->mu);
    gone = df_srv_peer_gone_locked(j);
    shutdown = j->shutdown;
    long at_cancel = j->prefilled_at_cancel;
    pthread_mutex_unlock(&S->mu);
    if (!rc && st.finish == DF_FINISH_CANCEL && j->start + st.n_prefilled < (int)j->nprompt)
      /* how far past the cancellation the prefill ran, for operators and tests */
      df_log_info("prefill cancelled (%s) at %d of %zu prompt positions, %ld run after the "
                  "cancellation",
                  shutdown ? "shutdown" : "client gone", j->start + st.n_prefilled, j->nprompt,
                  at_cancel >= 0 ? j->start + st.n_prefilled - at_cancel : 0L);
    stopped = j->gt.stopped;
    if (rc || (shutdown && !stopped) || gone) {
      df_gentext_free(&j->gt);
      memset(&j->gt, 0, sizeof j->gt);
      df_chat_parser_free(j->cp);
      j->cp = NULL;
      break;
    }
    if (j->cp) {
      if (!df_chat_parser_ended(j->cp)) df_chat_parser_finish(j->cp, on_chat_event, j);
      df_chat_parser_free(j->cp);
      j->cp = NULL;
      j->gt.n_reasoning = j->n_reasoning_tok;
    } else {
      df_gentext_finish(&j->gt);
    }
    if (j->req.stream) emit(j, 1);
    c->finish = c->ncb ? "tool_calls" : stopped || st.finish == DF_FINISH_STOP ? "stop" : "length";
    for (size_t k = 0; k < c->ncb; k++) {
      c->cb[k].c.name = c->cb[k].name.p;
      c->cb[k].c.nname = c->cb[k].name.n;
      c->cb[k].c.args = c->cb[k].args.p;
      c->cb[k].c.nargs = c->cb[k].args.n;
    }
    c->n_gen = st.n_gen;
    c->n_reasoning = j->gt.n_reasoning;
    total_gen += st.n_gen;
    total_drafted += st.n_drafted;
    total_accepted += st.n_accepted;
    if (st.draft_src) j->spec.draft = st.draft_src;
    j->spec.blocks += st.n_verify;
    for (int k = 1; k <= DF_DRAFT_MAX && k <= DF_SERVE_SPEC_MAX; k++) {
      j->spec.block_len[k - 1] += st.block_len[k];
      j->spec.acc_at[k - 1] += st.acc_at[k - 1];
    }
    total_reasoning += j->gt.n_reasoning;
    if (j->req.stream)
      df_serve_sse_delta_lp(&j->frames, &j->meta, ci, NULL, NULL, NULL, 0, c->finish, NULL, 0, 0,
                            0);
    publish(j);
    df_gentext_free(&j->gt);
    memset(&j->gt, 0, sizeof j->gt);
  }
  pthread_mutex_lock(&S->mu);
  if (!rc && !gone && !(shutdown && !stopped)) j->n_gen = total_gen;
  S->m_requests++;
  S->m_prompt_tokens += j->nprompt;
  S->m_cached_tokens += (unsigned long long)j->cached;
  S->m_gen_tokens += (unsigned long long)j->n_gen;
  S->m_drafted += (unsigned long long)total_drafted;
  S->m_accepted += (unsigned long long)total_accepted;
  S->m_blocks += (unsigned long long)j->spec.blocks;
  for (int p = 0; p < DF_SERVE_SPEC_MAX; p++) S->m_acc_at[p] += (unsigned long long)j->spec.acc_at[p];
  pthread_mutex_unlock(&S->mu);
  publish_stats(S);
  j->n_reasoning = total_reasoning;
  j->n_drafted = total_drafted;
  j->n_accepted = total_accepted;
  if (rc) {
    j->failed = 1;
    df_serve_err_set(&j->err, 500, "server_error", NULL, NULL, "generation failed: %s", e.msg);
  } else if (shutdown && !stopped) {
    j->failed = 1;
    df_serve_err_set(&j->err, 503, "server_error", "shutting_down", NULL,
                     "the server is shutting down; the generation was cancelled");
  } else if (!gone) {
    j->finish = j->ch[j->nch - 1].finish;
  }
  if (j->req.stream && !gone) {
    if (j->failed) {
      df_serve_sse_error(&j->frames, &j->err);
    } else if (j->req.include_usage) {
      df_serve_usage u = {(long)j->nprompt, total_gen, total_reasoning, j->cached, total_drafted,
                          total_accepted, &j->spec};
      df_serve_sse_usage(&j->frames, &j->meta, &u);
    }
    df_serve_sse_done(&j->frames);
  }
  publish(j);
  df_resp_result rr;
  df_serve_call calls[DF_RESP_MAX_CALLS];
  pthread_mutex_lock(&S->mu);
  int kept = j->rs && j->rq->store && df_resp_stream_result(j->rs, &rr, calls);
  char *hist = kept ? df_serve_responses_history(j->rq, &rr) : NULL;
  pthread_mutex_unlock(&S->mu);
  if (hist) df_srv_resp_keep(S, j->resp_id, hist);
}

void *df_srv_worker(void *arg) {
  srv *S = arg;
  pthread_mutex_lock(&S->mu);
  for (;;) {
    while (!S->stopping && S->fifo.n == 0) pthread_cond_wait(&S->work_cv, &S->mu);
    if (S->stopping) break;
    job *j = df_fifo_pop(&S->fifo);
    j->state = JOB_RUNNING;
    S->running = j;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&S->mu);
    run_job(S, j);
    pthread_mutex_lock(&S->mu);
    df_srv_job_finish_locked(S, j);
    if (j->peer_fd >= 0) close(j->peer_fd);
    j->peer_fd = -1;
    S->running = NULL;
    pthread_cond_broadcast(&j->cv);
    df_srv_job_unref_locked(j);
  }
  pthread_mutex_unlock(&S->mu);
  return NULL;
}
