/*
 * probe.c - runs one risky operation from inside the jail and prints the outcome as
 * `probe NAME ok` or `probe NAME errno=N (TEXT)`. Exit 0 if refused, 1 if it succeeded.
 * Built by the integration tests with the system cc; nothing here is privileged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int report(const char *name, long r)
{
    if (r >= 0) {
        printf("probe %s ok\n", name);
        return 1;
    }
    printf("probe %s errno=%d (%s)\n", name, errno, strerror(errno));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *op = argv[1];
    if (!strcmp(op, "io_uring_setup")) {
        char params[120] = {0};
        return report(op, syscall(SYS_io_uring_setup, 1, params)) ? 1 : 0;
    }
    if (!strcmp(op, "keyctl"))  /* KEYCTL_GET_KEYRING_ID of the session keyring */
        return report(op, syscall(SYS_keyctl, 0, -3, 0)) ? 1 : 0;
    if (!strcmp(op, "add_key"))
        return report(op, syscall(SYS_add_key, "user", "probe", "x", 1, -3)) ? 1 : 0;
    if (!strcmp(op, "bpf")) {
        char attr[128] = {0};
        return report(op, syscall(SYS_bpf, 0, attr, sizeof attr)) ? 1 : 0;
    }
    if (!strcmp(op, "mount"))
        return report(op, mount("none", "/tmp", "tmpfs", 0, NULL)) ? 1 : 0;
    if (!strcmp(op, "unshare_user"))
        return report(op, unshare(CLONE_NEWUSER)) ? 1 : 0;
    if (!strcmp(op, "perf_event_open")) {
        char attr[128] = {0};
        return report(op, syscall(SYS_perf_event_open, attr, 0, -1, -1, 0)) ? 1 : 0;
    }
    if (!strcmp(op, "userfaultfd"))
        return report(op, syscall(SYS_userfaultfd, 0)) ? 1 : 0;
    if (!strcmp(op, "open_by_handle_at")) {
        char fh[64] = {0};
        ((unsigned int *)fh)[0] = 8;
        return report(op, syscall(SYS_open_by_handle_at, AT_FDCWD, fh, O_RDONLY)) ? 1 : 0;
    }
    if (!strcmp(op, "chroot"))
        return report(op, chroot("/tmp")) ? 1 : 0;
    if (!strcmp(op, "setns"))
        return report(op, syscall(SYS_setns, 0, 0)) ? 1 : 0;
    if (!strcmp(op, "tiocsti")) {  /* push one byte into our own terminal's input */
        char c = '#';
        return report(op, ioctl(0, TIOCSTI, &c)) ? 1 : 0;
    }
    if (!strcmp(op, "ptrace") && argc > 2)
        return report(op, ptrace(PTRACE_ATTACH, atoi(argv[2]), 0, 0)) ? 1 : 0;
    if (!strcmp(op, "kill") && argc > 2)
        return report(op, kill(atoi(argv[2]), 0)) ? 1 : 0;
    if (!strcmp(op, "connect") && argc > 2) {  /* connect 127.0.0.1:PORT over TCP */
        int s = socket(2, 1, 0);
        struct { unsigned short fam, port; unsigned int addr; char z[8]; } sa = {2, 0, 0x0100007f, {0}};
        sa.port = (unsigned short)((atoi(argv[2]) >> 8) | ((atoi(argv[2]) & 0xff) << 8));
        return report(op, connect(s, (void *)&sa, sizeof sa)) ? 1 : 0;
    }
    fprintf(stderr, "probe: unknown op %s\n", op);
    return 2;
}
