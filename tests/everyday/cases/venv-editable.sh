# A virtual environment in the project, with an editable install of the project's package
# (offline: Debian's venv has setuptools but not wheel, so the setup.py way).
cp -r "$FIX/py" pkg
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check --no-index --no-build-isolation --no-use-pep517 -e ./pkg 2>/dev/null
.venv/bin/python -c 'import asbpkg; print(asbpkg.answer())'
.venv/bin/pip list --disable-pip-version-check --format=freeze 2>/dev/null | grep -i asbpkg | cut -d= -f1
