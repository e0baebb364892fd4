#!/usr/bin/env bash
# Print the path of a working Python interpreter of version X.Y (default 3.12), or fail.
#
# Usage: scripts/find-python.sh [X.Y]
#
# Looks, in order, at: $PYTHON<XY> (e.g. PYTHON312) if set; pythonX.Y on PATH (skipped when it
# is a pyenv shim that does not run because another version is selected); every pyenv version
# X.Y.* under $(pyenv root), or ~/.pyenv, newest first; /usr/local/bin and /usr/bin. Each
# candidate must run and report version X.Y. These machines ship Python 3.12 as a pyenv version
# beside the selected 3.11, so the pyenv step is what finds it on a fresh machine.
set -uo pipefail

want=${1:-3.12}
var="PYTHON${want//./}"
works() { [ -x "$1" ] && [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; }

candidates=()
[ -n "${!var:-}" ] && candidates+=("${!var}")
found=$(command -v "python$want" 2>/dev/null) && candidates+=("$found")
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for dir in $(ls -d "$root"/versions/"$want".* 2>/dev/null | sort -Vr); do
    candidates+=("$dir/bin/python$want")
done
candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want")

for candidate in "${candidates[@]}"; do
    if works "$candidate"; then
        echo "$candidate"
        exit 0
    fi
done
echo "find-python: no working Python $want (tried: ${candidates[*]});" \
     "install it (e.g. 'pyenv install $want') or set $var=/path/to/python$want" >&2
exit 1
