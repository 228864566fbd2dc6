/*
 * agent_sandbox.so: the compute node's belt for agent-sandbox jobs (SPANK plugin).
 *
 * The chaperon submits every job and step of a sandboxed session with
 * `--agent-sandbox=DIR`, DIR being the job directory its wrapper enters the jail with. On
 * the node, a task of such a job may start only as the administrator's agent-sandbox
 * entering that directory:
 *
 *   - a step's task: argv is exactly `EXE exec --job DIR` (srun's form);
 *   - the batch script: exactly the wrapper the chaperon writes for DIR, which `exec`s
 *     `EXE exec --job DIR` and nothing else.
 *
 * Anything else fails closed: the task does not start, the job's stderr and slurmd's log
 * say why. Jobs without the option are untouched. EXE is the plugin's own argument in
 * plugstack.conf (never anything from the job), so a job cannot name another program:
 *
 *   required /usr/lib/x86_64-linux-gnu/slurm-wlm/agent_sandbox.so exe=/usr/bin/agent-sandbox
 *
 * Built against slurm/spank.h (Debian: libslurm-dev) by the Makefile next to this file.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(agent-sandbox, 1);

/* Where the job prolog (root) marks, per job, that a job is sandboxed: a step of that job
 * without the tag is then refused too. Root-owned; world-readable, since the check runs in
 * the task as the user. */
#define MARK_DIR "/run/agent-sandbox-spank"

/* The wrapper is a few hundred bytes; anything near this is not it. */
#define MAX_WRAPPER 8192
#define OPTION "agent-sandbox"

static char exe[4096];

static int option_seen(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	/* The value is checked where it is used; here only that there is one. */
	return (optarg && *optarg) ? 0 : -1;
}

static struct spank_option agent_sandbox_option = {
	OPTION, "DIR",
	"[agent-sandbox] the job directory this job's tasks must enter the jail with "
	"(added by agent-sandbox's chaperon; a task that does not is refused)",
	1, 0, option_seen,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "exe=", 4) == 0 && strlen(av[i] + 4) < sizeof(exe))
			strcpy(exe, av[i] + 4);
	}
	/* The chaperon names the binary by its real path (/proc/self/exe): so must we, or a
	 * symlinked install (/usr/local/bin/agent-sandbox -> /opt/...) would refuse every job. */
	char real[PATH_MAX];
	if (exe[0] && realpath(exe, real) && strlen(real) < sizeof(exe))
		strcpy(exe, real);
	return spank_option_register(sp, &agent_sandbox_option) == ESPANK_SUCCESS ? 0 : -1;
}

/* Appends `s` to out (of size cap) single-quoted as the chaperon quotes it: ' -> '\''. */
static int append_quoted(char *out, size_t cap, size_t *len, const char *s)
{
	if (*len + 1 >= cap)
		return -1;
	out[(*len)++] = '\'';
	for (; *s; s++) {
		const char *piece = (*s == '\'') ? "'\\''" : NULL;
		size_t n = piece ? strlen(piece) : 1;
		if (*len + n + 1 >= cap)
			return -1;
		if (piece)
			memcpy(out + *len, piece, n);
		else
			out[*len] = *s;
		*len += n;
	}
	if (*len + 1 >= cap)
		return -1;
	out[(*len)++] = '\'';
	out[*len] = 0;
	return 0;
}

/* The wrapper script the chaperon writes for `dir` (chaperon/src/job.rs, write_job_dir). */
static int expected_wrapper(char *out, size_t cap, const char *dir)
{
	static const char head[] =
		"#!/bin/sh\n# agent-sandbox job wrapper: the job runs inside the session's jail, rebuilt from the\n"
		"# frozen policy in this directory.\nexec ";
	size_t len = strlen(head);
	if (len + 1 >= cap)
		return -1;
	memcpy(out, head, len + 1);
	if (append_quoted(out, cap, &len, exe) < 0)
		return -1;
	static const char mid[] = " exec --job ";
	if (len + sizeof(mid) >= cap)
		return -1;
	memcpy(out + len, mid, sizeof(mid));
	len += sizeof(mid) - 1;
	if (append_quoted(out, cap, &len, dir) < 0 || len + 2 >= cap)
		return -1;
	out[len++] = '\n';
	out[len] = 0;
	return 0;
}

/* Reads at most cap-1 bytes of `path`; -1 if it cannot be read or is longer. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	size_t got = 0;
	for (;;) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got == cap - 1) {
			char extra;
			n = read(fd, &extra, 1);
			close(fd);
			return n == 0 ? (ssize_t)got : -1;
		}
	}
	close(fd);
	buf[got] = 0;
	return (ssize_t)got;
}

/* Says why the task is refused, in the job's stderr and in slurmd's log. */
static int refuse(const char *why, const char *dir)
{
	char line[1024];
	snprintf(line, sizeof(line),
		 "agent-sandbox (SPANK): this job was submitted from an agent-sandbox session "
		 "(--agent-sandbox=%.200s) and its task %s: refused; only `%.120s exec --job DIR` may run",
		 dir, why, exe[0] ? exe : "(no exe= in plugstack.conf)");
	dprintf(STDERR_FILENO, "%s\n", line);
	slurm_error("%s", line);
	return -1;
}

/* A task that enters the jail: one line in slurmd's log, so a site sees the belt at work. */
static int admit(spank_t sp, const char *dir)
{
	uint32_t job = 0;
	spank_get_item(sp, S_JOB_ID, &job);
	slurm_info("agent-sandbox (SPANK): job %u: the task enters the jail with %.300s", job, dir);
	return 0;
}

/* The marker of `job` (MARK_DIR/<job>), as a path. */
static void mark_path(char *out, size_t cap, uint32_t job)
{
	snprintf(out, cap, "%s/%u", MARK_DIR, job);
}

/* Whether the prolog marked `job` as sandboxed (a root-owned regular file, never a link);
 * its job directory in `dir`. */
static int marked(uint32_t job, char *dir, size_t cap)
{
	char path[128];
	struct stat st;
	mark_path(path, sizeof(path), job);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0;
	ssize_t n = ok ? read(fd, dir, cap - 1) : -1;
	close(fd);
	dir[n > 0 ? n : 0] = 0;
	char *nl = strchr(dir, '\n');
	if (nl)
		*nl = 0;
	return ok;
}

/* On each node of a tagged job, before its first step (root): the job's marker. A failure is
 * logged, never returned: a failed prolog drains the node, and the tagged steps are checked
 * without it. */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	char *dir = NULL;
	uint32_t job = 0;
	if (spank_option_getopt(sp, &agent_sandbox_option, &dir) != ESPANK_SUCCESS || !dir)
		return 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	struct stat st;
	if (mkdir(MARK_DIR, 0755) < 0 && errno != EEXIST) {
		slurm_error("agent-sandbox (SPANK): cannot make %s: %m", MARK_DIR);
		return 0;
	}
	if (lstat(MARK_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		slurm_error("agent-sandbox (SPANK): %s is not a root-owned directory others cannot write", MARK_DIR);
		return 0;
	}
	char path[128];
	mark_path(path, sizeof(path), job);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		slurm_error("agent-sandbox (SPANK): cannot mark job %u in %s: %m", job, MARK_DIR);
		return 0;
	}
	dprintf(fd, "%s\n", dir);
	close(fd);
	return 0;
}

/* After the job on the node (root): its marker goes. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	uint32_t job = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	char path[128];
	mark_path(path, sizeof(path), job);
	unlink(path);
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	char *dir = NULL;
	if (spank_option_getopt(sp, &agent_sandbox_option, &dir) != ESPANK_SUCCESS || !dir) {
		/* An untagged step of a job the prolog marked as sandboxed: refused too. */
		uint32_t job = 0;
		char job_dir[1024];
		if (spank_get_item(sp, S_JOB_ID, &job) == ESPANK_SUCCESS && marked(job, job_dir, sizeof(job_dir)))
			return refuse("is a step without the tag (started outside agent-sandbox's chaperon)", job_dir);
		return 0; /* not a sandboxed job: untouched */
	}
	if (!exe[0] || exe[0] != '/')
		return refuse("cannot be checked (the plugin has no absolute exe= in plugstack.conf)", dir);
	if (dir[0] != '/' || strchr(dir, '\n'))
		return refuse("names no absolute job directory", dir);
	int argc = 0;
	char **argv = NULL;
	uint32_t step = 0;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv)
		return refuse("has no command line", dir);
	if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
		return refuse("has no step id", dir);
	if (step == SLURM_BATCH_SCRIPT) {
		/* argv[0] is slurmd's copy of the batch script: it must be the chaperon's wrapper. */
		char want[MAX_WRAPPER], have[MAX_WRAPPER];
		if (expected_wrapper(want, sizeof(want), dir) < 0)
			return refuse("names a job directory too long to check", dir);
		ssize_t n = read_small(argv[0], have, sizeof(have));
		if (n < 0 || (size_t)n != strlen(want) || memcmp(have, want, (size_t)n) != 0)
			return refuse("is a batch script other than agent-sandbox's job wrapper", dir);
		return admit(sp, dir);
	}
	if (argc == 4 && strcmp(argv[0], exe) == 0 && strcmp(argv[1], "exec") == 0 &&
	    strcmp(argv[2], "--job") == 0 && strcmp(argv[3], dir) == 0)
		return admit(sp, dir);
	return refuse("does not enter the jail", dir);
}
