/* A C program built against an installed hattn (find_package(hattn CONFIG) or pkg-config). */
#include "../consumer_checks.h"

#ifndef CONSUMER_NAME
#define CONSUMER_NAME "installed consumer"
#endif

int main(void) { return hattn_consumer_checks(CONSUMER_NAME); }
