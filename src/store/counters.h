/* Internal to the store: its counters (stats.c reports them; every other
 * part adds to them under the store's mutex). Counters only: nothing here
 * steers a read, so the stats never change what is read. */
#ifndef DF_STORE_COUNTERS_H
#define DF_STORE_COUNTERS_H

#include <stdint.h>

typedef struct df_store_counters {
  uint64_t bytes_read, bytes_demand, bytes_prefetch;
  uint64_t pf_used, pf_wasted, pf_dropped, pf_issued, pf_inflight_hits;
  uint64_t requests, hits, evictions, retries, checksum_errors, read_errors;
  uint64_t split_reads;                /* reads that were split over two copies */
  uint64_t prefill_need, prefill_read; /* record bytes prefill batches needed / were read */
  uint64_t all_need, all_read;         /* the same over every batch */
  uint64_t bytes_handed;
  double *wait_layer, wait_total;      /* time the model waited on experts */
} df_store_counters;

#endif
