# A project that declares a submodule, cloned fresh, then `git submodule update --init`.
git init -q -b main lib
echo lib > lib/lib.txt
git -C lib add lib.txt
git -C lib commit -qm lib
git init -q -b main app
git -C app -c protocol.file.allow=always submodule add -q ../lib lib
git -C app commit -qm with-lib
git clone -q app fresh
git -C fresh -c protocol.file.allow=always submodule update --init -q
cat fresh/lib/lib.txt
git -C fresh submodule status | awk '{print $2}'
echo more >> fresh/lib/lib.txt
git -C fresh/lib commit -qam in-submodule
git -C fresh/lib log --format=%s
