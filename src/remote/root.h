/* The files a setup writes at a model root that the layers below it read
 * back: the stream fetcher (fetcher.h) opens an install by them, and the
 * install side (setup/install.h) writes them. */
#ifndef DF_REMOTE_ROOT_H
#define DF_REMOTE_ROOT_H

#define DF_SETUP_STATE "deltafin-setup.json"
#define DF_SETUP_INFO "deltafin-setup.info.json"
#define DF_SETUP_VERIFIED "deltafin-setup.verified"
/* Held shared (flock) by every fetcher open on a stream install (run, serve,
 * warm) and exclusively by a setup adding record sums to it: a fetcher that
 * opened the install before the sums would journal records unchecked. */
#define DF_SETUP_FETCH_LOCK ".deltafin-fetch.lock"

#endif
