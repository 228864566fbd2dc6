# pytest on the project's tests (tmp_path included).
cp -r "$FIX/py" pkg
cd pkg
python3 -m pytest -q -p no:cacheprovider tests 2>&1 | grep -o '[0-9]* passed'
