#include "remote/reclock.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

static int warned; /* the no-locks warning, once per process */

static int lock_op(int fd, int cmd, short type, uint64_t off, uint64_t len) {
  struct flock fl;
  memset(&fl, 0, sizeof fl); /* l_pid must be 0 for OFD locks */
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = (off_t)off;
  fl.l_len = (off_t)len;
  int rc;
  do rc = fcntl(fd, cmd, &fl);
  while (rc < 0 && errno == EINTR);
  return rc;
}

int df_reclock_claim(int fd, df_ranges *rj, uint64_t off, uint64_t len, int wait, df_err *e) {
  if (lock_op(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, F_WRLCK, off, len)) {
    if (!wait && (errno == EAGAIN || errno == EACCES)) return DF_RECLOCK_BUSY;
    if (errno != EINVAL && errno != ENOLCK && errno != EOPNOTSUPP)
      return df_err_errno(e, "locking bytes %llu-%llu of a stream shard", (unsigned long long)off,
                          (unsigned long long)(off + len));
    /* no OFD locks on this filesystem (or kernel): fetch unlocked, as
     * before; only another process fetching at once can duplicate a fetch */
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      df_log_warn("stream install: this filesystem refuses byte-range locks (%s); two processes "
                  "fetching into it at once may fetch a record twice",
                  strerror(errno));
  }
  /* Whoever held the range before us may have journalled it: the journal
   * on disk, not our memory of it, says whether it is still missing. */
  uint64_t xxh;
  if (df_ranges_refresh(rj, e)) {
    df_reclock_release(fd, off, len);
    return -1;
  }
  /* exactly journalled, as every fetcher journals a record (a range only
   * covered by other ranges is the fetcher's to judge: df_fetcher_local) */
  if (df_ranges_lookup(rj, off, off + len, &xxh) == 0) {
    df_reclock_release(fd, off, len);
    return DF_RECLOCK_LOCAL;
  }
  return DF_RECLOCK_MINE;
}

void df_reclock_release(int fd, uint64_t off, uint64_t len) {
  (void)lock_op(fd, F_OFD_SETLK, F_UNLCK, off, len);
}
