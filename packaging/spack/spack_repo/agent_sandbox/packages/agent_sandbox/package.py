# A Spack recipe for agent-sandbox (Spack 1.x: build systems from the spack-packages
# repository). Use it as a repository of its own:
#
#   spack repo add packaging/spack/spack_repo/agent_sandbox
#   spack install agent-sandbox@main etc_dir=/sw/agent-sandbox/etc
#
# or from a checkout: `spack develop --path $PWD agent-sandbox@main` in an environment.
# Install as root into a tree users cannot write: the launcher refuses to run from a
# directory a user could change (docs/admin/install.md), so a per-user Spack tree holds a
# launcher that will not start.

from spack_repo.builtin.build_systems.cargo import CargoPackage

from spack.package import *


class AgentSandbox(CargoPackage):
    """A kernel-enforced jail for AI coding agents on shared Linux hosts and HPC login
    nodes: namespaces, seccomp, Landlock as the fallback, a read allow-list, filtered
    networking and Slurm through a chaperon, with a SPANK plugin for the compute nodes."""

    homepage = "https://example.invalid/agent-sandbox"
    # No public repository yet: point `git` at your mirror of the source, or use
    # `spack develop` on a checkout.
    git = "https://example.invalid/agent-sandbox.git"

    license("Apache-2.0")

    version("main", branch="main")

    variant("slurm", default=True, description="Build the SPANK plugin for the compute nodes")
    variant(
        "etc_dir",
        default="/etc/agent-sandbox",
        values=lambda v: v.startswith("/"),
        multi=False,
        description="Directory of the site config and admin lock file, compiled in",
    )

    depends_on("rust@1.91:", type="build")
    # ring's C and assembly parts; the SPANK plugin.
    depends_on("c", type="build")
    depends_on("gmake", type="build", when="+slurm")
    # slurm/spank.h only: slurmd and slurmstepd load the plugin and bring libslurm.
    depends_on("slurm", type="build", when="+slurm")

    requires("platform=linux", msg="agent-sandbox uses Linux namespaces, seccomp and Landlock")

    def setup_build_environment(self, env):
        # Fixed at build time so that no user can point the launcher at another admin file.
        env.set("AGENT_SANDBOX_ETC_DIR", self.spec.variants["etc_dir"].value)

    @property
    def build_args(self):
        return ["--locked", "--bin", "agent-sandbox"]

    @run_after("install")
    def install_stub_pages_and_plugin(self):
        prefix = self.prefix
        with working_dir(self.stage.source_path):
            # The stub the jail runs as every Slurm command, static, next to the launcher
            # (where the launcher looks for it). stub/release.sh builds it against musl
            # where rustup can add that target; here, glibc's static build.
            cargo(
                "rustc", "--locked", "--release", "-p", "agent-sandbox-stub",
                "--bin", "agent-sandbox-stub", "--", "-C", "target-feature=+crt-static",
            )
            install("target/release/agent-sandbox-stub", prefix.bin)

            # Man pages and completions from the launcher's own clap definition.
            cargo("run", "--locked", "-p", "xtask", "--", "dist", "spack-dist")
            mkdirp(prefix.share.man.man1)
            for page in find("spack-dist/man", "*.1", recursive=False):
                install(page, prefix.share.man.man1)
            for where, name in [
                (bash_completion_path(prefix), "agent-sandbox.bash"),
                (zsh_completion_path(prefix), "_agent-sandbox"),
                (fish_completion_path(prefix), "agent-sandbox.fish"),
            ]:
                mkdirp(where)
                install(join_path("spack-dist/completions", name), where)

            # Templates for the compiled-in etc_dir, the agent profiles built into the
            # binary (to start a site profile from), the AppArmor profile.
            share = join_path(prefix.share, "agent-sandbox")
            install_tree("etc", join_path(share, "etc"))
            install_tree("profiles", join_path(share, "profiles"))
            mkdirp(join_path(share, "apparmor"))
            install("packaging/apparmor/agent-sandbox", join_path(share, "apparmor"))
            filter_file(
                "/usr/bin/agent-sandbox",
                prefix.bin.join("agent-sandbox"),
                join_path(share, "apparmor", "agent-sandbox"),
                string=True,
            )

            if self.spec.satisfies("+slurm"):
                slurm = self.spec["slurm"].prefix
                make("-C", "slurm-plugins", f"CFLAGS=-O2 -g -I{slurm.include}")
                plugins = join_path(prefix.lib, "slurm")
                mkdirp(plugins)
                install("slurm-plugins/agent_sandbox.so", plugins)
                # The plugstack.conf line for this install (docs/admin/slurm.md).
                conf = join_path(share, "slurm", "plugstack.conf.d")
                mkdirp(conf)
                with open(join_path(conf, "agent-sandbox.conf"), "w") as f:
                    f.write(
                        "# Needs PrologFlags=Alloc (or Contain) in slurm.conf; restart slurmd after.\n"
                        f"required {plugins}/agent_sandbox.so exe={prefix.bin}/agent-sandbox\n"
                    )
