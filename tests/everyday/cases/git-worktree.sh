# git worktree add, work in it, remove it: parallel agents do this.
git init -q -b main repo
git -C repo commit -q --allow-empty -m base
git -C repo worktree add -q -b topic ../wt
echo x > wt/x.txt
git -C wt add x.txt
git -C wt commit -qm in-worktree
git -C repo log --format=%s topic
git -C repo worktree list --porcelain | grep -c '^worktree '
git -C repo worktree remove ../wt
git -C repo worktree list --porcelain | grep -c '^worktree '
