# Sourced by the parity scripts: sets $python to a python3 that can import torch, or exits 77
# (ctest: skipped), naming the test ($1). Debian's python3-torch lives in /usr/bin/python3's
# site-packages; a python3 earlier on PATH (pyenv, venv) may not see it.
python=
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c 'import torch' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "$1: SKIPPED (no python3 that can import torch; apt-get install python3-torch)"
  exit 77
fi
