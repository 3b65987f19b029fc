/* Shared between the planner's files, not part of its interface. */
#ifndef DF_PLAN_PLAN_INT_H
#define DF_PLAN_PLAN_INT_H

#include <stddef.h>
#include <stdint.h>

/* The units whose flag is `want` as "0-3,5,head" (the last unit is the
 * head), "none" when there are none. */
void df_plan_unit_list(const uint8_t *flags, int nunits, int want, char *out, size_t n);

#endif
