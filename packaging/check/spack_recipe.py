#!/usr/bin/env python3
"""Checks packaging/spack's package.py without Spack: imports it against a stand-in of the
part of Spack's package API it uses (`spack.package` and, unless a spack-packages checkout is
given, `spack_repo.builtin.build_systems.cargo`), reads its directives, and runs its
post-install method with recording stand-ins for the build tools and file operations, for
both values of the `slurm` variant.

What this proves: the file is Python that imports, names only what the stand-in provides,
declares what is checked below, and its install method runs through without a NameError or
a wrong call shape. What it does not: that Spack concretizes it or that the build works
(no Spack here; see docs/admin/install.md).

    packaging/check/spack_recipe.py [SPACK_PACKAGES_CHECKOUT]
"""

import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
import types

RECIPE = pathlib.Path(__file__).resolve().parents[1] / "spack/spack_repo/agent_sandbox/packages/agent_sandbox/package.py"
calls = []
directives = []


def directive(name):
    def record(*args, **kwargs):
        directives.append((name, args, kwargs))
        return lambda f: f if callable(f) else None

    return record


class Path(str):
    """A prefix path: attributes are subdirectories, as Spack's Prefix."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Path(f"{self}/{name}")

    def join(self, name):
        return Path(f"{self}/{name}")


def recorder(name):
    def record(*args, **kwargs):
        calls.append((name, args, kwargs))
        return [f"{args[0]}/agent-sandbox.1"] if name == "find" else None

    return record


class Ctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def stand_in_spack(checkout):
    package = types.ModuleType("spack.package")
    for d in ["version", "variant", "depends_on", "license", "requires", "maintainers", "conflicts"]:
        setattr(package, d, directive(d))
    for f in ["install", "install_tree", "filter_file", "find"]:
        setattr(package, f, recorder(f))
    # Directories are made for real, in a temporary prefix: the recipe writes a file there.
    package.mkdirp = lambda *p: [os.makedirs(d, exist_ok=True) for d in p] and None
    package.join_path = lambda *p: "/".join(p)
    package.working_dir = lambda d: (calls.append(("working_dir", (d,), {})), Ctx())[1]
    for shell in ["bash", "zsh", "fish"]:
        setattr(package, f"{shell}_completion_path", lambda prefix, s=shell: Path(f"{prefix}/share/{s}-completions"))

    def run_after(*phases, **kw):
        def mark(f):
            f._run_after = phases
            return f

        return mark

    package.run_after = run_after
    # What spack-packages' cargo.py imports from spack.package.
    for n in ["BuilderWithDefaults", "PackageBase", "Prefix", "Spec"]:
        setattr(package, n, type(n, (), {}))
    package.build_system = directive("build_system")
    package.when = lambda *a: Ctx()
    package.register_builder = lambda name: (lambda cls: cls)
    package.execute_install_time_tests = lambda *a: None
    package.__all__ = [n for n in vars(package) if not n.startswith("_")]
    spack = types.ModuleType("spack")
    spack.package = package
    sys.modules.update({"spack": spack, "spack.package": package})
    if checkout:
        sys.path.insert(0, str(pathlib.Path(checkout) / "repos"))
    else:
        cargo = types.ModuleType("spack_repo.builtin.build_systems.cargo")
        cargo.CargoPackage = type("CargoPackage", (), {})
        for name in ["spack_repo", "spack_repo.builtin", "spack_repo.builtin.build_systems"]:
            sys.modules[name] = types.ModuleType(name)
        sys.modules[cargo.__name__] = cargo


class Variant:
    def __init__(self, value):
        self.value = value


class Spec:
    def __init__(self, slurm):
        self.slurm = slurm
        self.variants = {"etc_dir": Variant("/sw/agent-sandbox/etc")}

    def satisfies(self, what):
        return what == ("+slurm" if self.slurm else "~slurm")

    def __getitem__(self, dep):
        assert dep == "slurm" and self.slurm, f"spec[{dep!r}] asked without +slurm"
        return types.SimpleNamespace(prefix=Path("/opt/slurm"))


def main():
    sys.dont_write_bytecode = True  # nothing left in the checkout
    checkout = sys.argv[1] if len(sys.argv) > 1 else None
    stand_in_spack(checkout)
    spec = importlib.util.spec_from_file_location("agent_sandbox_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = module.AgentSandbox
    names = {d[0] for d in directives}
    versions = [d[1][0] for d in directives if d[0] == "version"]
    deps = {d[1][0] for d in directives if d[0] == "depends_on"}
    variants = {d[1][0] for d in directives if d[0] == "variant"}
    problems = []
    if not versions:
        problems.append("no version()")
    for want in ["rust@1.91:", "slurm", "c"]:
        if want not in deps:
            problems.append(f"no depends_on({want!r})")
    if variants != {"slurm", "etc_dir"}:
        problems.append(f"variants are {sorted(variants)}")
    if "license" not in names:
        problems.append("no license()")
    # The install method, for both values of +slurm, with cargo and make recorded.
    for slurm in [True, False]:
        calls.clear()
        module.cargo = recorder("cargo")
        module.make = recorder("make")
        pkg = object.__new__(cls)
        pkg.spec = Spec(slurm)
        tmp = tempfile.mkdtemp(prefix="agent-sandbox-spack-check.")
        pkg.prefix = Path(tmp)
        pkg.stage = types.SimpleNamespace(source_path="/tmp/stage")
        pkg.install_stub_pages_and_plugin()
        env = {}
        pkg.setup_build_environment(types.SimpleNamespace(set=lambda k, v: env.__setitem__(k, v)))
        if env.get("AGENT_SANDBOX_ETC_DIR") != "/sw/agent-sandbox/etc":
            problems.append(f"setup_build_environment set {env}")
        made = [c for c in calls if c[0] == "make"]
        if bool(made) != slurm:
            problems.append(f"make called {len(made)} times with slurm={slurm}")
        conf = pathlib.Path(tmp, "share/agent-sandbox/slurm/plugstack.conf.d/agent-sandbox.conf")
        want = f"required {tmp}/lib/slurm/agent_sandbox.so exe={tmp}/bin/agent-sandbox"
        if slurm and want not in conf.read_text().splitlines():
            problems.append(f"{conf} lacks `{want}`: {conf.read_text()!r}")
        if not slurm and conf.exists():
            problems.append("a plugstack.conf line without the plugin (~slurm)")
        shutil.rmtree(tmp)
        cargos = [c[1][0] for c in calls if c[0] == "cargo"]
        if cargos != ["rustc", "run"]:
            problems.append(f"cargo calls: {cargos}")
    args = cls.build_args.fget(pkg) if isinstance(cls.__dict__.get("build_args"), property) else None
    if args != ["--locked", "--bin", "agent-sandbox"]:
        problems.append(f"build_args: {args}")
    if problems:
        print("packaging/spack: " + "; ".join(problems), file=sys.stderr)
        return 1
    base = "spack-packages' cargo.py" if checkout else "a stand-in CargoPackage"
    print(f"packaging/spack: package.py imports (on {base}), versions {versions}, install steps run for +slurm and ~slurm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
