# make with a C compiler.
cp -r "$FIX/c" c
make -s -C c
./c/hello
make -s -C c clean
ls c
