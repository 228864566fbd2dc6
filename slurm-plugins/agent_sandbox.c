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
 * the task as the user. A mark holds the job's user (uid) on its first line and the job
 * directory on its second. */
#define MARK_DIR "/run/agent-sandbox-spank"

/* libslurm's loaded configuration. slurmd, slurmstepd and the client commands all link
 * libslurmfull, which exports it; the public headers do not declare it. Weak: a process
 * without it sees NULL, and the check below fails closed. */
extern slurm_conf_t slurm_conf __attribute__((weak));

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

/* Whether Slurm runs every job's prolog on each of its nodes at allocation (PrologFlags=Alloc,
 * or Contain, which implies it). Without it slurmd runs the prolog on a node only with the
 * first step launched there, and with the SPANK options that step's launch request carries:
 * where they lack the tag, the node gets no mark and every untagged step of the job runs
 * there. With it, each node runs the prolog at allocation with the job's own options. */
static int prolog_at_allocation(void)
{
	if (&slurm_conf == NULL)
		return -1;
	return (slurm_conf.prolog_flags & (PROLOG_FLAG_ALLOC | PROLOG_FLAG_CONTAIN)) != 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	/* On the nodes (slurmd at its start, slurmstepd for each step): the belt holds only with
	 * the prolog at allocation, so without it nothing starts, and the log says what to set. */
	spank_context_t ctx = spank_context();
	if (ctx == S_CTX_SLURMD || ctx == S_CTX_REMOTE) {
		int at_alloc = prolog_at_allocation();
		if (at_alloc <= 0) {
			slurm_error("agent-sandbox (SPANK): %s: a sandboxed job's node mark would be written only "
				    "where its first step carries the tag, and a step started without it could run "
				    "outside the jail; set PrologFlags=Alloc (or Contain) in slurm.conf on every node and "
				    "the controller and restart slurmctld and slurmd. Refusing to run.",
				    at_alloc < 0 ? "cannot read PrologFlags (no slurm_conf in this process)"
						 : "PrologFlags has neither Alloc nor Contain");
			return -1;
		}
	}

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

/* Whether the prolog marked `job` as sandboxed for the user `uid` (a root-owned regular file,
 * never a link); its job directory in `dir`. A mark of another user is another job's, left
 * by a missed epilog (job ids start over): it neither blocks nor admits, and is logged. A mark
 * whose user cannot be read counts (fail closed): each job's prolog replaces or removes the
 * mark of its id on every node before any of its steps, so no stale mark outlives it. */
static int marked(uint32_t job, uid_t uid, char *dir, size_t cap)
{
	char path[128], buf[1200];
	struct stat st;
	mark_path(path, sizeof(path), job);
	dir[0] = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0;
	ssize_t n = ok ? read(fd, buf, sizeof(buf) - 1) : -1;
	close(fd);
	if (!ok)
		return 0;
	buf[n > 0 ? n : 0] = 0;
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = 0;
	char *end = NULL;
	errno = 0;
	unsigned long owner = strtoul(buf, &end, 10);
	int readable = buf[0] >= '0' && buf[0] <= '9' && end && *end == 0 && errno == 0;
	if (readable && owner != (unsigned long)uid) {
		slurm_info("agent-sandbox (SPANK): job %u: the mark %s is user %lu's, not this job's user %u: "
			   "another job's (a missed epilog), ignored",
			   job, path, owner, (unsigned)uid);
		return 0;
	}
	if (nl) {
		char *d = nl + 1, *nl2 = strchr(d, '\n');
		if (nl2)
			*nl2 = 0;
		snprintf(dir, cap, "%s", d);
	}
	return 1;
}

/* On each node of every job, at allocation (PrologFlags=Alloc, which the plugin requires on
 * the nodes), before any of its steps (root): a tagged job's mark, holding its user; for a job
 * without the tag, the mark of its id is removed, if a missed epilog left one (a job of that
 * id earlier, another user's maybe). A failure is logged, never returned: a failed prolog
 * drains the node, and the tagged steps are checked without the mark. */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	char *dir = NULL;
	uint32_t job = 0;
	uid_t uid = 0;
	char path[128];
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	mark_path(path, sizeof(path), job);
	if (spank_option_getopt(sp, &agent_sandbox_option, &dir) != ESPANK_SUCCESS || !dir) {
		if (unlink(path) == 0)
			slurm_info("agent-sandbox (SPANK): job %u: removed the mark %s another job of that id left "
				   "(a missed epilog)",
				   job, path);
		return 0;
	}
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		slurm_error("agent-sandbox (SPANK): job %u: no user id in the prolog: not marked", job);
		return 0;
	}
	struct stat st;
	if (mkdir(MARK_DIR, 0755) < 0 && errno != EEXIST) {
		slurm_error("agent-sandbox (SPANK): cannot make %s: %m", MARK_DIR);
		return 0;
	}
	if (lstat(MARK_DIR, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		slurm_error("agent-sandbox (SPANK): %s is not a root-owned directory others cannot write", MARK_DIR);
		return 0;
	}
	/* Written whole under another name, then renamed over any earlier mark of this id: a task
	 * never reads half a mark. */
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s/.%u.%ld", MARK_DIR, job, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		slurm_error("agent-sandbox (SPANK): cannot mark job %u in %s: %m", job, MARK_DIR);
		return 0;
	}
	int bad = dprintf(fd, "%u\n%s\n", (unsigned)uid, dir) < 0;
	bad |= close(fd) < 0;
	if (bad || rename(tmp, path) < 0) {
		slurm_error("agent-sandbox (SPANK): cannot mark job %u in %s: %m", job, MARK_DIR);
		unlink(tmp);
	}
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
		uid_t uid = 0;
		char job_dir[1024];
		if (spank_get_item(sp, S_JOB_ID, &job) == ESPANK_SUCCESS &&
		    spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS && marked(job, uid, job_dir, sizeof(job_dir)))
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
