/*
 * int80.c - test helper for src/jail/seccomp.rs (x86_64 only).
 *
 * A normal 64-bit program that enters the kernel through a foreign ABI:
 *   int80 getpid          i386 getpid (nr 20) via `int $0x80`
 *   int80 mkdir PATH      i386 mkdir  (nr 39) via `int $0x80`
 *   int80 x32 getpid      x86_64 getpid (39) | 0x40000000 via `syscall`
 *   int80 x32 mkdir PATH  x86_64 mkdir  (83) | 0x40000000 via `syscall`
 * Prints one line, e.g. `int80 mkdir ret=-1 errno=1`, and exits 0 if the
 * kernel refused the call, 1 if it succeeded, 2 on a usage/setup error.
 * Without a seccomp filter `int80 mkdir DIR` really creates DIR, which is
 * what makes the "directory must not exist under the filter" check real.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define X32_SYSCALL_BIT 0x40000000L

static long sys_int80(long nr, long a, long b)
{
    long ret;
    /* int $0x80 from 64-bit code uses the i386 ABI: nr in eax, args in
     * ebx/ecx; only the low 32 bits are seen. r8-r11 are clobbered. */
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(nr), "b"(a), "c"(b)
                     : "r8", "r9", "r10", "r11", "memory");
    return (int)ret; /* the i386 ABI returns a 32-bit value */
}

static long sys_x32(long nr, long a, long b)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr | X32_SYSCALL_BIT), "D"(a), "S"(b)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The i386 ABI only passes 32-bit pointers, so the path must live below
 * 4 GiB: copy it into a MAP_32BIT mapping. */
static char *low_copy(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memcpy(p, s, n);
    return p;
}

static int report(const char *abi, const char *what, long ret)
{
    if (ret < 0 && ret > -4096) {
        printf("%s %s ret=-1 errno=%ld\n", abi, what, -ret);
        fflush(stdout);
        return 0;
    }
    printf("%s %s ret=%ld errno=0\n", abi, what, ret);
    fflush(stdout);
    return 1;
}

int main(int argc, char **argv)
{
    int x32 = argc > 1 && strcmp(argv[1], "x32") == 0;
    int i = x32 ? 2 : 1;
    const char *abi = x32 ? "x32" : "int80";

    if (argc == i + 1 && strcmp(argv[i], "getpid") == 0) {
        long r = x32 ? sys_x32(39, 0, 0) : sys_int80(20, 0, 0);
        return report(abi, "getpid", r);
    }
    if (argc == i + 2 && strcmp(argv[i], "mkdir") == 0) {
        char *path = low_copy(argv[i + 1]);
        if (path == NULL) {
            perror("mmap(MAP_32BIT)");
            return 2;
        }
        long r = x32 ? sys_x32(83, (long)path, 0755)
                     : sys_int80(39, (long)path, 0755);
        return report(abi, "mkdir", r);
    }
    fprintf(stderr, "usage: int80 [x32] getpid | int80 [x32] mkdir PATH\n");
    return 2;
}
