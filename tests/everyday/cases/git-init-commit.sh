# git init, add, commit, branch, log: in a new repository of the project.
git init -q -b main repo
cd repo
echo one > a.txt
git add a.txt
git commit -qm first
git switch -q -c feature
echo two >> a.txt
git commit -qam second
git switch -q main
git merge -q --no-edit feature
git log --format=%s
git status --short --branch
