/* Open connections and the request deadline (the watchdog thread). */

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/util.h"
#include "serve/server_int.h"

/* -------------------------------------------------------- connections */

int df_srv_trusted(const srv *S, const char *addr) {
  for (int i = 0; i < S->o.ntrusted; i++)
    if (!strcmp(S->o.trusted_proxies[i], addr)) return 1;
  return 0;
}

/* Under cmu: over a cap, the oldest idle connection (between requests, or
 * one already refused) among those addr matches (NULL: all) is shut down so
 * that the new one is served; 0 if there was none. */
static int close_idle_locked(srv *S, const sock_ctx *self, const char *addr) {
  sock_ctx *old = NULL;
  for (sock_ctx *sc = S->socks; sc; sc = sc->next) {
    if (sc == self || sc->killed || sc->fd < 0 || (sc->in_request && !sc->refuse)) continue;
    if (addr && strcmp(sc->addr, addr)) continue;
    if (!old || sc->t0 < old->t0) old = sc;
  }
  if (!old) return 0;
  old->killed = 1;
  shutdown(old->fd, SHUT_RDWR);
  return 1;
}

/* A new connection over the total cap or its address's: idle ones make room
 * first; else it is answered 503 or 429 on its first request (a client that
 * is dropped unanswered retries blindly). Connections from a trusted proxy
 * are not capped per address: they carry many clients' requests. */
static void admit_connection_locked(srv *S, sock_ctx *sc) {
  int total = 0, same = 0;
  for (sock_ctx *x = S->socks; x; x = x->next) {
    if (x->killed) continue;
    total++;
    if (!strcmp(x->addr, sc->addr)) same++;
  }
  if (total > S->o.max_conns && !close_idle_locked(S, sc, NULL)) sc->refuse = 503;
  if (!sc->refuse && S->o.max_client_conns && same > S->o.max_client_conns &&
      !df_srv_trusted(S, sc->addr) && !close_idle_locked(S, sc, sc->addr))
    sc->refuse = 429;
}

void df_srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  srv *S = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    sock_ctx *sc = df_xcalloc(1, sizeof *sc);
    sc->fd = ci ? ci->connect_fd : -1;
    sc->t0 = df_now();
    const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ai && ai->client_addr) df_srv_addr_text(ai->client_addr, sc->addr, sizeof sc->addr);
    pthread_mutex_lock(&S->cmu);
    sc->next = S->socks;
    if (S->socks) S->socks->prev = sc;
    S->socks = sc;
    admit_connection_locked(S, sc);
    pthread_mutex_unlock(&S->cmu);
    *socket_context = sc;
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
    sock_ctx *sc = *socket_context;
    pthread_mutex_lock(&S->cmu);
    if (sc->prev) sc->prev->next = sc->next;
    else S->socks = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    pthread_mutex_unlock(&S->cmu);
    free(sc);
    *socket_context = NULL;
  }
}

void df_srv_addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  out[0] = 0;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

/* Behind a trusted proxy: the client's requests in progress (+1 or -1).
 * Returns 0 when counting one more would pass the cap. */
int df_srv_fwd_count(srv *S, const char *addr, int delta) {
  int ok = 1;
  pthread_mutex_lock(&S->cmu);
  struct fwd_count *f = NULL, *free_slot = NULL;
  for (size_t i = 0; i < sizeof S->fwd / sizeof S->fwd[0]; i++) {
    if (S->fwd[i].n && !strcmp(S->fwd[i].addr, addr)) f = &S->fwd[i];
    else if (!S->fwd[i].n && !free_slot) free_slot = &S->fwd[i];
  }
  if (delta > 0) {
    if (!f && (f = free_slot)) snprintf(f->addr, sizeof f->addr, "%s", addr);
    if (!f || (S->o.max_client_conns && f->n >= S->o.max_client_conns)) ok = 0;
    else f->n++;
  } else if (f) {
    f->n--;
  }
  pthread_mutex_unlock(&S->cmu);
  return ok;
}

/* MHD's URI log callback: the request line has arrived, so a request has
 * begun and its deadline (--request-timeout) runs from now. NULL: the
 * request context is made in df_srv_on_request. */
void *df_srv_on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
  (void)uri;
  srv *S = cls;
  const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  sock_ctx *sc = si ? si->socket_context : NULL;
  if (sc) {
    pthread_mutex_lock(&S->cmu);
    sc->t0 = df_now();
    sc->in_request = 1;
    pthread_mutex_unlock(&S->cmu);
  }
  return NULL;
}

/* The request deadline: --idle-timeout only closes silent connections, so a
 * client trickling a byte a second would hold its thread forever. A request
 * whose headers and body have not all arrived in time has its socket shut
 * down, which ends the connection in MHD's thread. Between requests (a kept
 * alive connection, or a new one before its request line) the deadline is
 * the idle timeout when that is longer: an idle client is not a slow
 * request, and one trickling its request line is still cut off there. */
void *df_srv_watchdog(void *arg) {
  srv *S = arg;
  double lim = S->o.request_timeout_s;
  double idle = S->o.idle_timeout_s > S->o.request_timeout_s ? S->o.idle_timeout_s : lim;
  if (S->o.idle_timeout_s == 0) idle = 1e30; /* idle connections are never closed */
  pthread_mutex_lock(&S->cmu);
  while (!S->wd_stop) {
    df_srv_timed_wait(&S->wd_cv, &S->cmu, 200);
    double now = df_now();
    for (sock_ctx *sc = S->socks; sc; sc = sc->next)
      if (!sc->complete && !sc->killed && sc->fd >= 0 &&
          now - sc->t0 > (sc->in_request ? lim : idle)) {
        sc->killed = 1;
        shutdown(sc->fd, SHUT_RDWR);
      }
  }
  pthread_mutex_unlock(&S->cmu);
  return NULL;
}
