/* A library preloaded into the launcher that starts a thread of its own and never ends it, as
 * a profiler's or a site's tracker may: the jail's init must not be cloned beside it. */
#include <pthread.h>
#include <unistd.h>

static void *idle(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return 0;
}

__attribute__((constructor)) static void start(void) {
    pthread_t t;
    pthread_create(&t, 0, idle, 0);
}
