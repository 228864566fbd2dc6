# tar and zip, packed and unpacked, with the contents compared.
cp -r "$FIX/data" data
tar czf data.tgz data
mkdir untar && tar xzf data.tgz -C untar
diff -r data untar/data && echo tar-same
zip -qr data.zip data
mkdir unzip && (cd unzip && unzip -q ../data.zip)
diff -r data unzip/data && echo zip-same
