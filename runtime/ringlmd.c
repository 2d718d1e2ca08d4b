/* ringlmd.c — the runtime daemon (placeholder until the runtime loop lands). */
#include <stdio.h>
int main(void) { fprintf(stderr, "ringlmd: not built yet\n"); return 1; }
