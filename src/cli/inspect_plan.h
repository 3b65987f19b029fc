/* inspect's memory-plan section (bf16 spine, decode-sized). */
#ifndef DF_CLI_INSPECT_PLAN_H
#define DF_CLI_INSPECT_PLAN_H

#include <jansson.h>
#include <stdint.h>

#include "format/config.h"
#include "format/safetensors.h"

/* Returns the plan's text lines (caller frees) and *json_out its JSON
 * object (or {"error": ...}); mem_limit 0 = this machine's memory. */
char *df_cli_inspect_plan(const df_st_set *set, const df_config *c, const char *dir,
                          uint64_t mem_limit, json_t **json_out);

#endif
