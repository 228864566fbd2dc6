# git clone from a local path, fetch and pull.
git init -q -b main src
git -C src commit -q --allow-empty -m upstream-1
git clone -q src dst
git -C src commit -q --allow-empty -m upstream-2
git -C dst pull -q --ff-only
git -C dst log --format=%s
git -C dst remote -v | awk '{print $1, $3}' | sort -u
