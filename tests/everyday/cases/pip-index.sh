# needs: net
# pip from a package index (the test hosts' PEP 503 index), into a venv.
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check --index-url "http://$NET/simple/" --trusted-host "$NET" asbdemo
.venv/bin/python -c 'import asbdemo; print(asbdemo.VALUE)'
