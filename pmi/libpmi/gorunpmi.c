/*
 * gorunpmi: a PMI-1 client library that speaks gorun's PMI_FD protocol.
 *
 * Open MPI 4.x bootstraps through this library under gorun: its "flux"
 * pmix component, selected when FLUX_JOB_ID is set, dlopen()s the library
 * named by FLUX_PMI_LIBRARY_PATH and calls the PMI-1 functions below. The
 * gorun agent on each host hands the library to its ranks in a sealed
 * memfd (FLUX_PMI_LIBRARY_PATH=/proc/self/fd/N) and answers on the other
 * end of PMI_FD, exactly as it answers MPICH's built-in PMI-1 client.
 *
 * The wire format is PMI-1's: one request line "cmd=NAME key=value ...\n",
 * one answer line. A value (put) and a message (abort) are the last field
 * of their line and run to its end, so they may hold spaces: Open MPI's
 * encoded values do.
 *
 * The clique (the job's ranks on this host) comes from GORUN_PMI_CLIQUE, a
 * comma-separated list of ranks the agent sets.
 *
 * Built by `make pmilib` into pmi/pmilib; see the README's MPI section.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PMI_SUCCESS 0
#define PMI_FAIL -1
#define PMI_ERR_INIT 1
#define PMI_ERR_NOMEM 2
#define PMI_ERR_INVALID_ARG 3
#define PMI_ERR_INVALID_KEY 4
#define PMI_ERR_INVALID_KEY_LENGTH 5
#define PMI_ERR_INVALID_VAL 6
#define PMI_ERR_INVALID_VAL_LENGTH 7
#define PMI_ERR_INVALID_LENGTH 8

#define EXPORT __attribute__((visibility("default")))
#define LINE_MAX_BYTES 4096 /* gorun's pmi.MaxLine */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static int inited;
static int my_rank, my_size;
static int kvs_max = 256, key_max = 64, val_max = 1024;
static char kvs_name[257];

static char rbuf[2 * LINE_MAX_BYTES]; /* bytes read but not yet consumed */
static size_t rlen;
static char line[LINE_MAX_BYTES + 1]; /* the last answer, without its newline */

static void complain(const char *what)
{
    fprintf(stderr, "gorunpmi: %s\n", what);
}

static int send_all(const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* read_line reads one answer line into line[]. */
static int read_line(void)
{
    for (;;) {
        char *nl = memchr(rbuf, '\n', rlen);
        if (nl) {
            size_t n = (size_t)(nl - rbuf);
            if (n > LINE_MAX_BYTES)
                return -1;
            memcpy(line, rbuf, n);
            line[n] = 0;
            rlen -= n + 1;
            memmove(rbuf, nl + 1, rlen);
            return 0;
        }
        if (rlen >= sizeof rbuf)
            return -1;
        ssize_t r = read(fd, rbuf + rlen, sizeof rbuf - rlen);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        rlen += (size_t)r;
    }
}

/* call sends req and reads the answer, which must be "cmd=want ...". */
static int call(const char *req, const char *want)
{
    char head[64];
    if (fd < 0)
        return PMI_ERR_INIT;
    if (send_all(req, strlen(req)) < 0 || read_line() < 0) {
        complain("lost the connection to gorun's agent (PMI_FD)");
        return PMI_FAIL;
    }
    snprintf(head, sizeof head, "cmd=%s", want);
    size_t n = strlen(head);
    if (strncmp(line, head, n) != 0 || (line[n] != 0 && line[n] != ' ')) {
        complain("unexpected answer from gorun's agent");
        return PMI_FAIL;
    }
    return PMI_SUCCESS;
}

/* field finds " key=" in line[] and returns its value (up to the next
 * space, or the whole rest of the line if rest is set), or NULL. */
static const char *field(const char *key, int rest, char *out, size_t outlen)
{
    char pat[32];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    size_t n = rest ? strlen(p) : strcspn(p, " ");
    if (n + 1 > outlen)
        return NULL;
    memcpy(out, p, n);
    out[n] = 0;
    return out;
}

static int int_field(const char *key, int *v)
{
    char b[32];
    if (!field(key, 0, b, sizeof b))
        return -1;
    *v = atoi(b);
    return 0;
}

static int rc_ok(void)
{
    int rc;
    return int_field("rc", &rc) == 0 && rc == 0;
}

static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    char *end;
    if (!s || !*s)
        return -1;
    long x = strtol(s, &end, 10);
    if (*end || x < 0 || x > 1 << 30)
        return -1;
    *v = (int)x;
    return 0;
}

static int do_init(void)
{
    if (env_int("PMI_FD", &fd) < 0 || env_int("PMI_RANK", &my_rank) < 0 || env_int("PMI_SIZE", &my_size) < 0) {
        fd = -1;
        complain("PMI_FD, PMI_RANK or PMI_SIZE is not set: start the program with gorun");
        return PMI_FAIL;
    }
    int rc = call("cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init");
    if (rc != PMI_SUCCESS)
        return rc;
    if (!rc_ok()) {
        complain("gorun's agent refused PMI-1 init");
        return PMI_FAIL;
    }
    if ((rc = call("cmd=get_maxes\n", "maxes")) != PMI_SUCCESS)
        return rc;
    if (int_field("kvsname_max", &kvs_max) < 0 || int_field("keylen_max", &key_max) < 0 || int_field("vallen_max", &val_max) < 0)
        return PMI_FAIL;
    if (kvs_max > (int)sizeof kvs_name - 1)
        kvs_max = (int)sizeof kvs_name - 1;
    if ((rc = call("cmd=get_my_kvsname\n", "my_kvsname")) != PMI_SUCCESS)
        return rc;
    if (!field("kvsname", 0, kvs_name, sizeof kvs_name))
        return PMI_FAIL;
    inited = 1;
    return PMI_SUCCESS;
}

EXPORT int PMI_Init(int *spawned)
{
    pthread_mutex_lock(&mu);
    int rc = inited ? PMI_SUCCESS : do_init();
    pthread_mutex_unlock(&mu);
    if (spawned)
        *spawned = 0;
    return rc;
}

EXPORT int PMI_Initialized(int *initialized)
{
    if (!initialized)
        return PMI_ERR_INVALID_ARG;
    *initialized = inited;
    return PMI_SUCCESS;
}

EXPORT int PMI_Finalize(void)
{
    pthread_mutex_lock(&mu);
    int rc = PMI_SUCCESS;
    if (inited) {
        rc = call("cmd=finalize\n", "finalize_ack");
        close(fd);
        fd = -1;
        inited = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT int PMI_Get_size(int *size)
{
    if (!size)
        return PMI_ERR_INVALID_ARG;
    if (!inited)
        return PMI_ERR_INIT;
    *size = my_size;
    return PMI_SUCCESS;
}

EXPORT int PMI_Get_rank(int *rank)
{
    if (!rank)
        return PMI_ERR_INVALID_ARG;
    if (!inited)
        return PMI_ERR_INIT;
    *rank = my_rank;
    return PMI_SUCCESS;
}

/* ask sends a query whose answer carries one integer field. */
static int ask(const char *req, const char *want, const char *key, int *v)
{
    if (!v)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&mu);
    int rc = call(req, want);
    if (rc == PMI_SUCCESS && int_field(key, v) < 0)
        rc = PMI_FAIL;
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT int PMI_Get_universe_size(int *size)
{
    return ask("cmd=get_universe_size\n", "universe_size", "size", size);
}

EXPORT int PMI_Get_appnum(int *appnum)
{
    return ask("cmd=get_appnum\n", "appnum", "appnum", appnum);
}

EXPORT int PMI_Barrier(void)
{
    pthread_mutex_lock(&mu);
    int rc = call("cmd=barrier_in\n", "barrier_out");
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT int PMI_Abort(int exit_code, const char *msg)
{
    char req[LINE_MAX_BYTES];
    char clean[1024];
    size_t i = 0;
    for (; msg && msg[i] && i < sizeof clean - 1; i++)
        clean[i] = (msg[i] == '\n' || msg[i] == '\r' || msg[i] == '\t') ? ' ' : msg[i];
    clean[i] = 0;
    snprintf(req, sizeof req, "cmd=abort exitcode=%d msg=%s\n", exit_code, clean);
    pthread_mutex_lock(&mu);
    if (fd >= 0)
        (void)send_all(req, strlen(req));
    pthread_mutex_unlock(&mu);
    _exit(exit_code);
}

EXPORT int PMI_KVS_Get_my_name(char *kvsname, int length)
{
    if (!kvsname || length <= 0)
        return PMI_ERR_INVALID_ARG;
    if (!inited)
        return PMI_ERR_INIT;
    if ((int)strlen(kvs_name) + 1 > length)
        return PMI_ERR_INVALID_LENGTH;
    strcpy(kvsname, kvs_name);
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_name_length_max(int *length)
{
    if (!length)
        return PMI_ERR_INVALID_ARG;
    *length = kvs_max + 1;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_key_length_max(int *length)
{
    if (!length)
        return PMI_ERR_INVALID_ARG;
    *length = key_max;
    return PMI_SUCCESS;
}

EXPORT int PMI_KVS_Get_value_length_max(int *length)
{
    if (!length)
        return PMI_ERR_INVALID_ARG;
    *length = val_max;
    return PMI_SUCCESS;
}

/* plain reports whether s is a non-empty word without spaces, '=' or
 * control characters: what a KVS name or a key may be. */
static int plain(const char *s, int max)
{
    int n = 0;
    if (!s || !*s)
        return 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] <= ' ' || s[n] == '=' || s[n] == 0x7f)
            return 0;
    return n <= max;
}

EXPORT int PMI_KVS_Put(const char *kvsname, const char *key, const char *value)
{
    char req[LINE_MAX_BYTES + 1];
    if (!plain(kvsname, kvs_max))
        return PMI_ERR_INVALID_ARG;
    if (!plain(key, key_max))
        return PMI_ERR_INVALID_KEY;
    if (!value)
        return PMI_ERR_INVALID_VAL;
    if ((int)strlen(value) > val_max)
        return PMI_ERR_INVALID_VAL_LENGTH;
    for (const char *p = value; *p; p++)
        if ((unsigned char)*p < ' ' || *p == 0x7f)
            return PMI_ERR_INVALID_VAL;
    int n = snprintf(req, sizeof req, "cmd=put kvsname=%s key=%s value=%s\n", kvsname, key, value);
    if (n < 0 || n >= (int)sizeof req)
        return PMI_ERR_INVALID_VAL_LENGTH;
    pthread_mutex_lock(&mu);
    int rc = call(req, "put_result");
    if (rc == PMI_SUCCESS && !rc_ok()) {
        complain(line);
        rc = PMI_FAIL;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

EXPORT int PMI_KVS_Commit(const char *kvsname)
{
    /* Puts go to the agent at once; the next barrier publishes them. */
    return plain(kvsname, kvs_max) ? PMI_SUCCESS : PMI_ERR_INVALID_ARG;
}

EXPORT int PMI_KVS_Get(const char *kvsname, const char *key, char *value, int length)
{
    char req[LINE_MAX_BYTES];
    if (!plain(kvsname, kvs_max))
        return PMI_ERR_INVALID_ARG;
    if (!plain(key, key_max))
        return PMI_ERR_INVALID_KEY;
    if (!value || length <= 0)
        return PMI_ERR_INVALID_ARG;
    snprintf(req, sizeof req, "cmd=get kvsname=%s key=%s\n", kvsname, key);
    pthread_mutex_lock(&mu);
    int rc = call(req, "get_result");
    if (rc == PMI_SUCCESS) {
        const char *v = rc_ok() ? strstr(line, " value=") : NULL;
        if (!v) {
            rc = PMI_FAIL; /* not found: callers probe for keys */
        } else {
            v += strlen(" value=");
            if ((int)strlen(v) + 1 > length)
                rc = PMI_ERR_INVALID_LENGTH;
            else
                strcpy(value, v);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* clique parses GORUN_PMI_CLIQUE into ranks (if not NULL, up to max) and
 * returns how many ranks it lists, or -1. */
static int clique(int *ranks, int max)
{
    const char *s = getenv("GORUN_PMI_CLIQUE");
    int n = 0;
    if (!s || !*s)
        return -1;
    while (*s) {
        char *end;
        long r = strtol(s, &end, 10);
        if (end == s || r < 0)
            return -1;
        if (ranks && n < max)
            ranks[n] = (int)r;
        n++;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

EXPORT int PMI_Get_clique_size(int *size)
{
    if (!size)
        return PMI_ERR_INVALID_ARG;
    int n = clique(NULL, 0);
    if (n < 0) {
        *size = 1;
        return inited ? PMI_SUCCESS : PMI_ERR_INIT;
    }
    *size = n;
    return PMI_SUCCESS;
}

EXPORT int PMI_Get_clique_ranks(int *ranks, int length)
{
    if (!ranks || length <= 0)
        return PMI_ERR_INVALID_ARG;
    int n = clique(ranks, length);
    if (n < 0) {
        ranks[0] = my_rank;
        return inited ? PMI_SUCCESS : PMI_ERR_INIT;
    }
    return n > length ? PMI_ERR_INVALID_LENGTH : PMI_SUCCESS;
}

EXPORT int PMI_Get_id(char *id, int length)
{
    return PMI_KVS_Get_my_name(id, length);
}

EXPORT int PMI_Get_kvs_domain_id(char *id, int length)
{
    return PMI_KVS_Get_my_name(id, length);
}

EXPORT int PMI_Get_id_length_max(int *length)
{
    return PMI_KVS_Get_name_length_max(length);
}
