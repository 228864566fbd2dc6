# npm init and npm install of a package from a tarball (npm pack), then require it.
cp -r "$FIX/js/lib" lib
(cd lib && npm pack -q >/dev/null)
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error ./lib/asb-lib-1.0.0.tgz >/dev/null
node -e 'console.log(require("asb-lib").answer())'
node -e 'console.log(Object.keys(require("./package.json").dependencies).join(","))'
