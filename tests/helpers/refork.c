/*
 * refork.c - an attacker that outruns a walk of /proc: starts CHAINS chains (argv[1],
 * default 8) in which every process forks once and exits at once, so each pid lives for
 * microseconds and a killer that reads pids first and signals them later signals a pid that
 * is already gone, while the chain goes on in a new one. With a FILE (argv[2]) every process
 * appends one byte to it first: the file grows for as long as any chain lives. Runs until
 * killed.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int chains = argc > 1 ? atoi(argv[1]) : 8;
    int beat = argc > 2 ? open(argv[2], O_WRONLY | O_APPEND | O_CREAT, 0600) : -1;
    for (int i = 1; i < chains; i++)
        if (fork() == 0)
            break;
    for (;;) {
        if (beat >= 0)
            (void)!write(beat, ".", 1);
        pid_t p = fork();
        if (p > 0)
            _exit(0);
    }
}
