# Scaffolders make a repository: npm init + git init, and a Python package the same way.
mkdir app
cd app
npm init -y >/dev/null
git init -q -b main
printf 'node_modules/\n' > .gitignore
git add .
git commit -qm scaffold
git ls-files
