/* Open connections and the request deadline (the watchdog thread). */

#include <stdlib.h>
#include <sys/socket.h>

#include "base/util.h"
#include "serve/server_int.h"

/* -------------------------------------------------------- connections */

void df_srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  srv *S = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    sock_ctx *sc = df_xcalloc(1, sizeof *sc);
    sc->fd = ci ? ci->connect_fd : -1;
    sc->t0 = df_now();
    pthread_mutex_lock(&S->cmu);
    sc->next = S->socks;
    if (S->socks) S->socks->prev = sc;
    S->socks = sc;
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
