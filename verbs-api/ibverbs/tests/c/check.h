/* CHECK(cond, fmt, ...) of uroce's C test programs: when cond is false, prints
 * "PROG: FAILED at line N (cond): <message> (errno E)" and exits 1. Define PROG (the
 * program's name, a string) before including this. MIT OR Apache-2.0. */

#ifndef UROCE_CHECK_H
#define UROCE_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, PROG ": FAILED at line %d (%s): ",     \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " (errno %d)\n", errno);               \
			exit(1);                                               \
		}                                                              \
	} while (0)

#endif
