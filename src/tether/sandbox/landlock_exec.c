/* landlock-exec: restrict writes with Landlock, then exec a command.
 *
 *   landlock-exec [--rw DIR]... [--no-net] -- PROGRAM [ARG]...
 *
 * Runs inside bubblewrap after its mounts (a Landlock-restricted process may not change
 * mounts). Every write-type access (create, remove, write, truncate, rename across) is denied
 * except beneath the --rw directories; reads and execution stay as bubblewrap left them. With
 * --no-net (ABI >= 4) TCP bind and connect are denied too. Built by tether on first use. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

static long create_ruleset(const struct landlock_ruleset_attr *attr, size_t size, uint32_t flags) {
    return syscall(__NR_landlock_create_ruleset, attr, size, flags);
}

static int die(const char *what) {
    fprintf(stderr, "landlock-exec: %s: %s\n", what, strerror(errno));
    return 126;
}

int main(int argc, char **argv) {
    int i = 1, no_net = 0;
    const char *rw[64];
    int nrw = 0;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { i++; break; }
        if (strcmp(argv[i], "--rw") == 0 && i + 1 < argc && nrw < 64) { rw[nrw++] = argv[++i]; continue; }
        if (strcmp(argv[i], "--no-net") == 0) { no_net = 1; continue; }
        fprintf(stderr, "landlock-exec: unknown argument %s\n", argv[i]);
        return 126;
    }
    if (i >= argc) { fprintf(stderr, "landlock-exec: no command\n"); return 126; }

    long abi = create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) return die("Landlock is not available");
    uint64_t writes = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
        LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
        LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
        LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2) writes |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3) writes |= LANDLOCK_ACCESS_FS_TRUNCATE;

    struct { uint64_t fs; uint64_t net; } attr = { writes, 0 };
    size_t attr_size = sizeof(uint64_t);
    if (no_net && abi >= 4) {
        attr.net = (1ULL << 0) | (1ULL << 1); /* LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP */
        attr_size = sizeof(attr);
    }
    int ruleset = (int)create_ruleset((const struct landlock_ruleset_attr *)&attr, attr_size, 0);
    if (ruleset < 0) return die("landlock_create_ruleset");

    for (int k = 0; k < nrw; k++) {
        struct landlock_path_beneath_attr beneath = { .allowed_access = writes };
        beneath.parent_fd = open(rw[k], O_PATH | O_CLOEXEC);
        if (beneath.parent_fd < 0) {
            if (errno == ENOENT) continue; /* a root that does not exist allows nothing */
            return die(rw[k]);
        }
        if (syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) != 0)
            return die("landlock_add_rule");
        close(beneath.parent_fd);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return die("PR_SET_NO_NEW_PRIVS");
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) != 0) return die("landlock_restrict_self");
    close(ruleset);
    execvp(argv[i], &argv[i]);
    return die(argv[i]);
}
