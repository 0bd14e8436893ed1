/* landlock-exec: confine with Landlock (and optionally seccomp), then exec a command.
 *
 *   landlock-exec [--rw PATH]... [--ro PATH]... [--list DIR]... [--restrict-reads]
 *                 [--no-net] [--scope] [--drop-caps] [--seccomp-fd N]
 *                 [--cgroup PROCS_FILE | --nproc N] [--protect PATH | --protect-dir DIR |
 *                 --writable-mount PATH | --hide PATH]...
 *                 -- PROGRAM [ARG]...
 *
 * Two uses. Inside bubblewrap, after its mounts (a Landlock-restricted process may not change
 * mounts), with only --rw: writes are denied except beneath the --rw paths, reads stay as
 * bubblewrap left them. Alone (tether's Landlock-only backend), with --restrict-reads: reading
 * and executing are handled too, so only the --ro/--rw paths can be read (an allow-list; tether
 * enumerates the siblings along the way to each hidden path) and --list directories can only be
 * listed. --no-net (ABI >= 4) denies TCP bind and connect; --scope (ABI >= 6) denies connecting
 * to abstract Unix sockets and signalling processes outside this domain. --seccomp-fd reads a
 * classic-BPF program (struct sock_filter[]) from fd N and installs it after no_new_privs and
 * Landlock, just before exec. Rules on files (not directories) keep only the file rights.
 * --drop-caps empties every capability set and the bounding set and locks the securebits so a
 * root-owned command cannot regain them on exec: Landlock lets CAP_SYS_PTRACE read another
 * process's /proc/<pid>/environ, and the Landlock-only sandbox has no user namespace to shed
 * root's capabilities for it. --cgroup joins a pids cgroup (writes our pid into its
 * cgroup.procs) and --nproc sets RLIMIT_NPROC, so the Landlock-only backend needs no shell in
 * front of it to bound the number of processes. --protect makes PATH read-only with a bind
 * mount in a private user + mount namespace (the Landlock-only backend's answer to Landlock's
 * inability to take a right away beneath a writable directory: `.git` inside the workspace);
 * --protect-dir first creates DIR empty if it is missing (like bwrap, it stays behind, inert),
 * so it cannot be created later; --writable-mount binds PATH writable again (a writable root
 * beneath a protected one); --hide covers PATH with an empty read-only tmpfs (a directory) or
 * /dev/null (a file), as bwrap does for denied paths inside writable ones; all in argument
 * order, parents first. Any failure exits 126 (125 for the cgroup)
 * before the command runs: nothing runs half-confined. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REFER (1ULL << 13)
#define FS_TRUNCATE (1ULL << 14)
#define FS_FILE_RIGHTS (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE)
#define NET_BIND_TCP (1ULL << 0)
#define NET_CONNECT_TCP (1ULL << 1)
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SCOPE_SIGNAL (1ULL << 1)

struct ruleset_attr {
    uint64_t fs;
    uint64_t net;
    uint64_t scoped;
};

static long create_ruleset(const void *attr, size_t size, uint32_t flags) {
    return syscall(__NR_landlock_create_ruleset, attr, size, flags);
}

static int die(const char *what) {
    fprintf(stderr, "landlock-exec: %s: %s\n", what, strerror(errno));
    return 126;
}

static int add_rule(int ruleset, const char *path, uint64_t access) {
    struct landlock_path_beneath_attr beneath = { .allowed_access = access };
    struct stat st;
    /* O_NOFOLLOW is not used: the roots are resolved by tether, and /dev/stdout-style links
     * are meant to follow. */
    beneath.parent_fd = open(path, O_PATH | O_CLOEXEC);
    if (beneath.parent_fd < 0) {
        if (errno == ENOENT) return 0; /* a root that does not exist allows nothing */
        return die(path);
    }
    if (fstat(beneath.parent_fd, &st) != 0) return die(path);
    if (!S_ISDIR(st.st_mode)) beneath.allowed_access &= FS_FILE_RIGHTS;
    if (beneath.allowed_access != 0 &&
        syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) != 0) {
        int saved = errno;
        close(beneath.parent_fd);
        errno = saved;
        return die(path);
    }
    close(beneath.parent_fd);
    return 0;
}

#define SECBITS_ALL_LOCKED 0x3f /* NOROOT, NO_SETUID_FIXUP, KEEP_CAPS, each with its lock */

static int drop_caps(void) {
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL && errno != EPERM)
            return die("dropping the capability bounding set");
    }
    if (prctl(PR_SET_SECUREBITS, SECBITS_ALL_LOCKED, 0, 0, 0) != 0 && errno != EPERM)
        return die("PR_SET_SECUREBITS");
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(__NR_capset, &header, data) != 0) return die("capset");
    return 0;
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A private user + mount namespace in which each --protect path is bind-mounted read-only. */
static int protect_paths(int argc, char **argv, int end) {
    char map[64];
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return die("unshare(user, mount) for --protect");
    if (write_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT) return die("setgroups");
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if (write_file("/proc/self/uid_map", map) != 0) return die("uid_map");
    snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (write_file("/proc/self/gid_map", map) != 0) return die("gid_map");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return die("making mounts private");
    for (int k = 1; k < end; k++) {
        int make = strcmp(argv[k], "--protect-dir") == 0;
        int writable = strcmp(argv[k], "--writable-mount") == 0;
        if (strcmp(argv[k], "--hide") == 0) {
            const char *hidden = argv[++k];
            struct stat st;
            if (lstat(hidden, &st) != 0) continue; /* nothing to hide */
            if (S_ISDIR(st.st_mode)) {
                if (mount("tmpfs", hidden, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          "size=4k,mode=0555") != 0) return die(hidden);
            } else if (mount("/dev/null", hidden, NULL, MS_BIND, NULL) != 0 ||
                       mount(NULL, hidden, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
                             MS_NODEV | MS_NOEXEC, NULL) != 0) {
                return die(hidden);
            }
            continue;
        }
        if (!make && !writable && strcmp(argv[k], "--protect") != 0) continue;
        const char *path = argv[++k];
        if (make && mkdir(path, 0755) != 0 && errno != EEXIST) return die(path);
        struct statvfs sv;
        if (statvfs(path, &sv) != 0) {
            if (errno == ENOENT) continue; /* nothing there, nothing to protect */
            return die(path);
        }
        if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) != 0) return die(path);
        /* A remount in a user namespace must keep the flags the mount is locked with. */
        unsigned long flags = MS_REMOUNT | MS_BIND | (writable ? 0 : MS_RDONLY);
        if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
        if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
        if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
        if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
        if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
        if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
        if (mount(NULL, path, NULL, flags, NULL) != 0) return die(path);
    }
    (void)argc;
    return 0;
}

static int load_seccomp(int fd) {
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    if (buf == NULL) return die("seccomp program");
    for (;;) {
        if (len == cap) {
            cap *= 2;
            unsigned char *grown = realloc(buf, cap);
            if (grown == NULL) return die("seccomp program");
            buf = grown;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0) {
            if (errno == EINTR) continue;
            return die("reading the seccomp program");
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    close(fd);
    if (len == 0 || len % sizeof(struct sock_filter) != 0) {
        fprintf(stderr, "landlock-exec: the seccomp program is %zu bytes, not whole instructions\n", len);
        return 126;
    }
    struct sock_fprog prog = { .len = (unsigned short)(len / sizeof(struct sock_filter)),
                               .filter = (struct sock_filter *)buf };
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return die("loading the seccomp filter");
    return 0;
}

int main(int argc, char **argv) {
    int i = 1, no_net = 0, scope = 0, restrict_reads = 0, seccomp = -1, caps = 0;
    const char *cgroup = NULL;
    int protect = 0;
    long nproc = -1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { i++; break; }
        if ((strcmp(argv[i], "--rw") == 0 || strcmp(argv[i], "--ro") == 0 ||
             strcmp(argv[i], "--list") == 0) && i + 1 < argc) { i++; continue; }
        if (strcmp(argv[i], "--no-net") == 0) { no_net = 1; continue; }
        if (strcmp(argv[i], "--scope") == 0) { scope = 1; continue; }
        if (strcmp(argv[i], "--drop-caps") == 0) { caps = 1; continue; }
        if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc) { cgroup = argv[++i]; continue; }
        if (strcmp(argv[i], "--nproc") == 0 && i + 1 < argc) { nproc = atol(argv[++i]); continue; }
        if ((strcmp(argv[i], "--protect") == 0 || strcmp(argv[i], "--protect-dir") == 0 ||
             strcmp(argv[i], "--writable-mount") == 0 || strcmp(argv[i], "--hide") == 0) &&
            i + 1 < argc) { protect = 1; i++; continue; }
        if (strcmp(argv[i], "--restrict-reads") == 0) { restrict_reads = 1; continue; }
        if (strcmp(argv[i], "--seccomp-fd") == 0 && i + 1 < argc) { seccomp = atoi(argv[++i]); continue; }
        fprintf(stderr, "landlock-exec: unknown argument %s\n", argv[i]);
        return 126;
    }
    if (i >= argc) { fprintf(stderr, "landlock-exec: no command\n"); return 126; }
    if (cgroup != NULL) {
        FILE *procs = fopen(cgroup, "w");
        if (procs == NULL || fprintf(procs, "%d\n", (int)getpid()) < 0 || fclose(procs) != 0) {
            fprintf(stderr, "tether sandbox: cannot join pids cgroup %s\n", cgroup);
            return 125;
        }
    }
    if (nproc > 0) {
        struct rlimit limit = { (rlim_t)nproc, (rlim_t)nproc };
        if (setrlimit(RLIMIT_NPROC, &limit) != 0) return die("RLIMIT_NPROC");
    }

    if (protect && protect_paths(argc, argv, i - 1) != 0) return 126;

    long abi = create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) return die("Landlock is not available");
    uint64_t writes = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
        LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
        LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
        LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2) writes |= FS_REFER;
    if (abi >= 3) writes |= FS_TRUNCATE;
    uint64_t reads = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE;

    struct ruleset_attr attr = { writes | (restrict_reads ? reads : 0), 0, 0 };
    size_t attr_size = sizeof(uint64_t);
    if (no_net && abi >= 4) {
        attr.net = NET_BIND_TCP | NET_CONNECT_TCP;
        attr_size = 2 * sizeof(uint64_t);
    }
    if (scope && abi >= 6) {
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
        attr_size = sizeof(attr);
    }
    int ruleset = (int)create_ruleset(&attr, attr_size, 0);
    if (ruleset < 0) return die("landlock_create_ruleset");

    for (int k = 1; k < i - 1; k++) {
        uint64_t access;
        if (strcmp(argv[k], "--rw") == 0) access = writes | reads;
        else if (strcmp(argv[k], "--ro") == 0) access = reads;
        else if (strcmp(argv[k], "--list") == 0) access = FS_READ_DIR;
        else if (strcmp(argv[k], "--cgroup") == 0 || strcmp(argv[k], "--nproc") == 0 ||
                 strcmp(argv[k], "--seccomp-fd") == 0 || strcmp(argv[k], "--protect") == 0 ||
                 strcmp(argv[k], "--protect-dir") == 0 || strcmp(argv[k], "--writable-mount") == 0 ||
                 strcmp(argv[k], "--hide") == 0) { k++; continue; }
        else continue;
        /* Inside bwrap (no --restrict-reads) reads are not handled, so they cannot be granted. */
        access &= attr.fs;
        k++;
        if (access != 0 && add_rule(ruleset, argv[k], access) != 0) return 126;
    }
    if (caps && drop_caps() != 0) return 126;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return die("PR_SET_NO_NEW_PRIVS");
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) != 0) return die("landlock_restrict_self");
    close(ruleset);
    if (seccomp >= 0 && load_seccomp(seccomp) != 0) return 126;
    execvp(argv[i], &argv[i]);
    return die(argv[i]);
}
