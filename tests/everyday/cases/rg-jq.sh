# ripgrep and jq over the project's files.
cp -r "$FIX/data" data
rg -c needle data/notes.txt
rg --files data | sort
jq -c '.items | map(. * 2)' data/doc.json
jq -r '.nested.ok' data/doc.json
