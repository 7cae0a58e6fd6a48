/* The offload pipeline's second thread: runs one job at a time (the copies
 * of the new weights of the tile before the one the CPU optimizer steps).
 * A plain mutex/condvar handshake; no queue, because the step alternates
 * run/wait strictly.
 *
 * A job the worker has not started by the time the step thread waits for
 * it is taken back and run inline: on a loaded machine (2 cores shared by
 * several processes) the woken worker may not get a core before the
 * optimizer finishes its tile, and waiting for it to be scheduled would
 * make the pipeline slower than the sequential step it is meant to beat. */
#include <pthread.h>
#include <stdlib.h>

#include "stage3_tiers.h"

struct zero__s3_worker {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*fn)(void *);
    void *arg;
    int pending; /* posted, not picked up yet: wait may take it back */
    int busy;    /* posted or running */
    int quit;
    unsigned long long taken_back;
};

static void *loop(void *p) {
    zero__s3_worker *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit && !w->pending) break;
        w->pending = 0;
        void (*fn)(void *) = w->fn;
        void *arg = w->arg;
        pthread_mutex_unlock(&w->mu);
        fn(arg);
        pthread_mutex_lock(&w->mu);
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

zero__s3_worker *zero__s3_worker_start(void) {
    zero__s3_worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->th, NULL, loop, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        return NULL;
    }
    return w;
}

void zero__s3_worker_run(zero__s3_worker *w, void (*fn)(void *), void *arg) {
    if (!w) {
        fn(arg);
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->fn = fn;
    w->arg = arg;
    w->busy = 1;
    w->pending = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void zero__s3_worker_wait(zero__s3_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    if (w->pending) { /* not started: cheaper to run it here than to wait for the worker to get a core */
        w->pending = 0;
        w->busy = 0;
        w->taken_back++;
        void (*fn)(void *) = w->fn;
        void *arg = w->arg;
        pthread_mutex_unlock(&w->mu);
        fn(arg);
        return;
    }
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

unsigned long long zero__s3_worker_taken_back(const zero__s3_worker *w) { return w ? w->taken_back : 0; }

void zero__s3_worker_stop(zero__s3_worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
