-- Lmod modulefile for agent-sandbox installed in a module tree (docs/admin/install.md):
-- copy to MODULEPATH/agent-sandbox/0.1.0.lua and set `root` to the install prefix, the tree
-- that holds bin/agent-sandbox and bin/agent-sandbox-stub (a Spack or EasyBuild install, or
-- the files of the .deb/.rpm unpacked there). The launcher runs only from a tree users cannot
-- write, and reads the site config from the directory compiled into it (/etc/agent-sandbox
-- unless built with AGENT_SANDBOX_ETC_DIR), not from anything this module sets.

local root = "/sw/agent-sandbox/0.1.0"

whatis("Name: agent-sandbox")
whatis("Version: 0.1.0")
whatis("Description: a kernel-enforced jail for AI coding agents on HPC login nodes")

help([[
agent-sandbox runs an AI coding agent in the current project directory inside a jail:

  agent-sandbox run -- CMD    run CMD in the jail
  agent-sandbox codex         run the codex profile's agent
  agent-sandbox doctor        check this host

man agent-sandbox for the rest.
]])

local launcher = pathJoin(root, "bin", "agent-sandbox")
if mode() == "load" and not isFile(launcher) then
    LmodError("agent-sandbox: " .. launcher .. " is missing: set `root` in this modulefile ("
        .. myFileName() .. ") to where agent-sandbox is installed")
end

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("MANPATH", pathJoin(root, "share", "man"))
-- An empty entry keeps man's default search path when MANPATH was unset.
append_path("MANPATH", "")
