/* armed-guard: the armed-names guard of sandbox/armed.py in C (no interpreter start-up per
 * command). Same arguments, same state file, same behaviour; armed.py stays the fallback where
 * no C compiler is available and documents the design.
 *
 *   armed-guard STATE ROOT... -- PROGRAM [ARG]...
 *
 * Notes the time, runs PROGRAM (in this process group), and afterwards moves aside every armed
 * name (.git, .envrc, .tether, .vscode, .idea, .agents/skills, a HEAD beside objects/ and refs/
 * or a commondir file) that appeared under a ROOT during it, reporting each on stderr. STATE keeps every directory with its mtime
 * and every armed path with its inode, so only directories that changed are listed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VERSION "tether-armed 1"
#define QUARANTINE ".tether-quarantine"
#define WALK_BUDGET_NS 3000000000LL

typedef struct { char *path; long long val; } Ent;
typedef struct { Ent *v; size_t n, cap; } Vec;

static void push(Vec *v, const char *path, long long val) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->v = realloc(v->v, v->cap * sizeof(Ent));
        if (v->v == NULL) { perror("armed-guard"); exit(126); }
    }
    v->v[v->n].path = strdup(path);
    v->v[v->n].val = val;
    v->n++;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const Ent *)a)->path, ((const Ent *)b)->path);
}

static void sort(Vec *v) { if (v->n) qsort(v->v, v->n, sizeof(Ent), by_path); }

static Ent *find(const Vec *sorted, const char *path) {
    Ent key = { (char *)path, 0 };
    return sorted->n ? bsearch(&key, sorted->v, sorted->n, sizeof(Ent), by_path) : NULL;
}

static long long now_ns(int clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int is_dir_at(const char *dir, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file_at(const char *dir, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* armed.py's ARMED_NAMES and ARMED_CHILDREN (tests/security/test_armed_skills.py compares them) */
static const char *armed_names[] = { ".git", ".envrc", ".tether", ".vscode", ".idea" };
static const char *armed_children[][2] = { { ".agents", "skills" } };

static int is_armed(const char *dir, const char *name) {
    for (size_t i = 0; i < sizeof(armed_names) / sizeof(armed_names[0]); i++)
        if (strcmp(name, armed_names[i]) == 0) return 1;
    const char *slash = strrchr(dir, '/');
    const char *parent = slash ? slash + 1 : dir;
    for (size_t i = 0; i < sizeof(armed_children) / sizeof(armed_children[0]); i++)
        if (strcmp(parent, armed_children[i][0]) == 0 && strcmp(name, armed_children[i][1]) == 0)
            return 1;
    if (strcmp(name, "HEAD") != 0) return 0;
    if (is_file_at(dir, "commondir")) return 1;
    return is_dir_at(dir, "objects") && is_dir_at(dir, "refs");
}

/* List `path`: armed entries into `armed` (path, inode); subdirectories into `subdirs`. */
static void scan_dir(const char *path, Vec *armed, Vec *subdirs) {
    DIR *d = opendir(path);
    if (d == NULL) return;
    struct dirent *e;
    char child[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "", e->d_name) >=
            (int)sizeof(child)) continue;
        struct stat st;
        if (lstat(child, &st) != 0) continue;
        if (is_armed(path, e->d_name)) { push(armed, child, (long long)st.st_ino); continue; }
        if (strstr(e->d_name, QUARANTINE) != NULL) continue;
        if (S_ISDIR(st.st_mode)) push(subdirs, child, 0);
    }
    closedir(d);
}

static void walk(const char *root, Vec *dirs, Vec *armed) {
    Vec stack = { 0 };
    long long deadline = now_ns(CLOCK_MONOTONIC) + WALK_BUDGET_NS;
    push(&stack, root, 0);
    while (stack.n) {
        if (now_ns(CLOCK_MONOTONIC) > deadline) {
            fprintf(stderr, "tether sandbox: %s is too large to watch whole for planted "
                    ".git/.envrc/.vscode (%zu folders in 3 s); folders not reached are not "
                    "watched\n", root, dirs->n);
            return;
        }
        char *path = stack.v[--stack.n].path;
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        push(dirs, path, (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
        scan_dir(path, armed, &stack);
    }
}

typedef struct { Vec dirs, armed, pending; } State;

static int load_state(const char *path, State *s) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (len == cap) { cap *= 2; buf = realloc(buf, cap + 1); }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    char *end = buf + len, *rec = buf;
    if (strcmp(rec, VERSION) != 0) return -1;
    memset(s, 0, sizeof(*s));
    size_t reclen = strlen(rec);
    for (rec += reclen + 1; rec < end; rec += reclen + 1) {
        reclen = strlen(rec);
        char kind = rec[0], *tab = strchr(rec, '\t');
        if (kind == '\0' || tab == NULL) continue;
        *tab = '\0'; /* rec + 1: the number (or pid); tab + 1: the path (or start) */
        long long number = strtoll(rec + 1, NULL, 10);
        if (kind == 'd') push(&s->dirs, tab + 1, number);
        else if (kind == 'a') push(&s->armed, tab + 1, number);
        else if (kind == 'p') push(&s->pending, rec + 1, strtoll(tab + 1, NULL, 10));
    }
    return 0;
}

static void save_state(const char *path, const State *s) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = NULL;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) f = fdopen(fd, "w");
    if (f == NULL) { perror("armed-guard: state"); return; }
    fputs(VERSION, f);
    for (size_t i = 0; i < s->dirs.n; i++) fprintf(f, "%cd%lld\t%s", 0, s->dirs.v[i].val, s->dirs.v[i].path);
    for (size_t i = 0; i < s->armed.n; i++) fprintf(f, "%ca%lld\t%s", 0, s->armed.v[i].val, s->armed.v[i].path);
    for (size_t i = 0; i < s->pending.n; i++)
        fprintf(f, "%cp%s\t%lld", 0, s->pending.v[i].path, s->pending.v[i].val);
    if (fclose(f) != 0 || rename(tmp, path) != 0) { perror("armed-guard: state"); unlink(tmp); }
}

static int under_root(const char *path, char **roots, int nroots) {
    for (int r = 0; r < nroots; r++) {
        size_t n = strlen(roots[r]);
        while (n > 1 && roots[r][n - 1] == '/') n--;
        if (strncmp(path, roots[r], n) == 0 && path[n] == '/') return 1;
    }
    return 0;
}

static int mounted(const char *path, char **roots, int nroots) {
    char top[PATH_MAX];
    for (int r = 0; r < nroots; r++) {
        snprintf(top, sizeof(top), "%s/.git", roots[r]);
        if (strcmp(path, top) == 0) return 1;
        snprintf(top, sizeof(top), "%s/.tether", roots[r]);
        if (strcmp(path, top) == 0) return 1;
    }
    return 0;
}

/* Move aside armed names new since `since` (see armed.sweep); updates `s`. */
static void sweep(State *s, char **roots, int nroots, long long since) {
    Vec before_dirs = s->dirs, before_armed = s->armed, dirs = { 0 }, armed = { 0 }, changed = { 0 };
    sort(&before_dirs);
    sort(&before_armed);
    struct stat st;
    for (size_t i = 0; i < before_armed.n; i++)
        if (lstat(before_armed.v[i].path, &st) == 0) push(&armed, before_armed.v[i].path, (long long)st.st_ino);
    for (int r = 0; r < nroots; r++)
        if (find(&before_dirs, roots[r]) == NULL) walk(roots[r], &dirs, &armed);
    for (size_t i = 0; i < before_dirs.n; i++) {
        if (lstat(before_dirs.v[i].path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        push(&dirs, before_dirs.v[i].path, mtime);
        if (mtime >= since) push(&changed, before_dirs.v[i].path, 0);
    }
    for (size_t i = 0; i < changed.n; i++) {
        Vec subs = { 0 };
        scan_dir(changed.v[i].path, &armed, &subs);
        for (size_t k = 0; k < subs.n; k++)
            if (find(&before_dirs, subs.v[k].path) == NULL) walk(subs.v[k].path, &dirs, &armed);
    }
    sort(&armed);
    Vec kept = { 0 };
    char target[PATH_MAX];
    for (size_t i = 0; i < armed.n; i++) {
        const char *path = armed.v[i].path;
        if (i > 0 && strcmp(path, armed.v[i - 1].path) == 0) continue; /* found twice */
        Ent *was = find(&before_armed, path);
        if ((was != NULL && was->val == armed.v[i].val) || mounted(path, roots, nroots) ||
            !under_root(path, roots, nroots)) {
            push(&kept, path, armed.v[i].val);
            continue;
        }
        int moved = 0;
        for (int n = 1; n < 1000 && !moved; n++) {
            snprintf(target, sizeof(target), "%s%s-%d", path, QUARANTINE, n);
            struct stat t;
            if (lstat(target, &t) == 0) continue;
            if (rename(path, target) == 0) moved = 1;
            else break;
        }
        if (moved)
            fprintf(stderr, "tether sandbox: %s appeared during this command and was moved aside "
                    "to %s: a later step outside the sandbox could run or load it (git config and "
                    "hooks, direnv, editor tasks, tether settings, skills)\n", path, target);
        else
            push(&kept, path, armed.v[i].val);
    }
    s->dirs = dirs;
    s->armed = kept;
}

/* Sweep the windows of guards that died before their own sweep; drop their entries. */
static void sweep_dead(State *s, char **roots, int nroots, long long since) {
    Vec alive = { 0 };
    long long from = since;
    int any = 0;
    for (size_t i = 0; i < s->pending.n; i++) {
        pid_t pid = (pid_t)atoi(s->pending.v[i].path);
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
            any = 1;
            if (s->pending.v[i].val < from) from = s->pending.v[i].val;
        } else {
            push(&alive, s->pending.v[i].path, s->pending.v[i].val);
        }
    }
    s->pending = alive;
    if (any || since != LLONG_MAX) sweep(s, roots, nroots, from);
}

static int lock_state(const char *path) {
    char name[PATH_MAX];
    snprintf(name, sizeof(name), "%s.lock", path);
    int fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) while (lockf(fd, F_LOCK, 0) != 0 && errno == EINTR) {}
    return fd;
}

static void on_signal(int sig) { (void)sig; } /* the command gets it too; sweep after */

int main(int argc, char **argv) {
    int split = 0;
    for (int i = 1; i < argc; i++) if (strcmp(argv[i], "--") == 0) { split = i; break; }
    if (split < 3 || split + 1 >= argc) {
        fprintf(stderr, "usage: armed-guard STATE ROOT... -- COMMAND...\n");
        return 126;
    }
    const char *state_path = argv[1];
    char **roots = argv + 2;
    int nroots = split - 2;
    char me[32];
    snprintf(me, sizeof(me), "%d", (int)getpid());

    State s;
    int lock = lock_state(state_path);
    if (load_state(state_path, &s) != 0) {
        memset(&s, 0, sizeof(s));
        for (int r = 0; r < nroots; r++) walk(roots[r], &s.dirs, &s.armed);
    } else {
        sweep_dead(&s, roots, nroots, LLONG_MAX);
    }
    /* File times come from a coarse clock: start a second early (see armed.py). */
    long long since = now_ns(CLOCK_REALTIME) - 1000000000LL;
    push(&s.pending, me, since);
    save_state(state_path, &s);
    if (lock >= 0) close(lock);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("armed-guard: fork"); return 126; }
    if (pid == 0) {
        execvp(argv[split + 1], argv + split + 1); /* caught signals reset to default on exec */
        fprintf(stderr, "tether sandbox: cannot start %s: %s\n", argv[split + 1], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}

    lock = lock_state(state_path);
    State now;
    if (load_state(state_path, &now) == 0) s = now;
    Vec others = { 0 };
    for (size_t i = 0; i < s.pending.n; i++)
        if (strcmp(s.pending.v[i].path, me) != 0) push(&others, s.pending.v[i].path, s.pending.v[i].val);
    s.pending = others;
    sweep_dead(&s, roots, nroots, since);
    save_state(state_path, &s);
    if (lock >= 0) close(lock);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 126;
}
