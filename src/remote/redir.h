/* Remembered redirect targets for setup's range requests.
 *
 * On the Hugging Face Hub every `/{repo}/resolve/{commit}/{file}` answers 302
 * to a signed CDN URL, so each range request would pay two round trips. A
 * df_http handle remembers requested -> effective URL here (one entry per
 * shard file, a bounded table, the oldest entry replaced when full) and sends
 * later range requests of the same URL straight to the target. The owner
 * forgets an entry when its target stops answering (signed URLs expire).
 * One owner, no locking: each df_http handle has its own table. */
#ifndef DF_REMOTE_REDIR_H
#define DF_REMOTE_REDIR_H

typedef struct df_redir df_redir;

#define DF_REDIR_MAX 256

df_redir *df_redir_new(int cap); /* cap <= 0 or > DF_REDIR_MAX: DF_REDIR_MAX */
void df_redir_free(df_redir *t);

/* The remembered target of `from`, or NULL. *same_origin (when not NULL) is
 * set to whether the target has the scheme, host and port of `from`: only
 * then may credentials go to it, the rule curl applies on redirects. The
 * pointer is valid until the next df_redir_put/df_redir_forget. */
const char *df_redir_lookup(const df_redir *t, const char *from, int *same_origin);

/* Remembers from -> to (replacing an older target of `from`). An entry whose
 * URLs cannot be parsed as http(s) is not kept. 0 kept, -1 not. */
int df_redir_put(df_redir *t, const char *from, const char *to);

/* Forgets the target of `from`; 1 if there was one. */
int df_redir_forget(df_redir *t, const char *from);

int df_redir_count(const df_redir *t);

/* 1 when both URLs parse and have the same scheme, host and port (the
 * scheme's default port when none is given), 0 otherwise. */
int df_redir_same_origin(const char *a, const char *b);

#endif
