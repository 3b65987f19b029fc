/* One fetch per record across processes: byte-range claims on a stream
 * install's sparse shard.
 *
 * Several processes may fetch into one install (run and serve, two runs,
 * run and warm). Before fetching a record a process takes an OFD write
 * lock (fcntl F_OFD_SETLK[W]) on the record's byte range of the shard file,
 * then re-reads the shard's journal (ranges.h): a record another process
 * journalled meanwhile is local, and the claimer reads its bytes instead of
 * fetching them. The lock is held until the record is journalled; a process
 * killed mid-fetch loses its locks with its file descriptions (the kernel
 * drops OFD locks on the last close), and its unjournalled bytes are not
 * local for anyone, so a waiter then fetches the record itself.
 *
 * OFD locks conflict between open file descriptions, not between threads
 * using one: the fetcher's threads share one description per shard and keep
 * their own in-process table of records in flight. A filesystem without
 * OFD locks gets one warning and unlocked claims (the journal re-read
 * still applies). */
#ifndef DF_REMOTE_RECLOCK_H
#define DF_REMOTE_RECLOCK_H

#include <stdint.h>

#include "base/err.h"
#include "remote/ranges.h"

typedef enum {
  DF_RECLOCK_LOCAL = 0, /* journalled (by anyone): nothing to fetch, no lock held */
  DF_RECLOCK_MINE = 1,  /* locked and not local: fetch, journal, then release */
  DF_RECLOCK_BUSY = 2,  /* (wait = 0 only) another process holds it: nothing held */
} df_reclock_state;

/* Claims [off, off + len) of the shard open as fd (read-write) whose
 * journal is rj. wait = 1 blocks until the range is free; a caller must
 * hold no other claim while it blocks (claims are then never waited for in
 * a cycle). Returns a df_reclock_state, or -1 with e set. */
int df_reclock_claim(int fd, df_ranges *rj, uint64_t off, uint64_t len, int wait, df_err *e);
/* Releases a DF_RECLOCK_MINE claim. */
void df_reclock_release(int fd, uint64_t off, uint64_t len);

#endif
