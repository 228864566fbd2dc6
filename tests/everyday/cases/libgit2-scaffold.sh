# A repository made and committed to through libgit2 (what `cargo new` uses to make one),
# its config set through libgit2 too, then read by git.
/usr/bin/python3 - <<'PY'
import pygit2
repo = pygit2.init_repository("crate", False, initial_head="main")
with open("crate/lib.rs", "w") as f:
    f.write("pub fn answer() -> u32 { 42 }\n")
repo.index.add("lib.rs")
repo.index.write()
tree = repo.index.write_tree()
sig = pygit2.Signature("Agent", "agent@example.org", 0, 0)
repo.create_commit("HEAD", sig, sig, "cargo new", tree, [])
repo.config["user.name"] = "Agent"
repo.remotes.create("origin", "https://example.org/crate.git")
print(repo.head.shorthand)
PY
git -C crate log --format=%s
git -C crate config user.name
git -C crate remote get-url origin
git -C crate status --short
